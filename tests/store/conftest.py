"""Session-wide Redis servers of our own: a three-primary cluster and a single server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.store.cluster import LocalCluster, Node, cluster_port


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster")).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def single_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """A plain server with the cluster nodes' durability, so that it can be killed too."""
    node = Node(cluster_port(), tmp_path_factory.mktemp("single"), cluster=False)
    node.start()
    yield node
    node.stop()
