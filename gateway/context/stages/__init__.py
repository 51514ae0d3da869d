"""Pipeline stages, picked by name from `STAGES` in the order select → rerank → cluster →
compress; each has the one signature of `Stage`."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from gateway.context.stages.base import Stage, StageContext, StageResult
from gateway.context.stages.cluster import cluster_items
from gateway.context.stages.compress import compress_items
from gateway.context.stages.rerank import rerank_items
from gateway.context.stages.select import select_items

STAGES: Mapping[str, Stage] = MappingProxyType(
    {
        "select": select_items,
        "rerank": rerank_items,
        "cluster": cluster_items,
        "compress": compress_items,
    }
)

__all__ = ["STAGES", "Stage", "StageContext", "StageResult"]
