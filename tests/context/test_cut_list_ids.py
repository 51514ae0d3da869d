"""A JSON list cut to its first record names the left-out records' ids in its marker."""

from gateway.context.summarize import _json


def test_a_cut_list_names_the_ids_of_the_records_it_left_out() -> None:
    # a database query listed two pages; the agent patches the second one next
    text = ('{"results": [{"object": "page", "id": "28ed-81ac"}, {"object": "page", '
            '"id": "28ed-81d9"}, {"object": "page", "id": 7}, {"note": "no id"}], '
            '"has_more": false}')
    out = _json(text, 2)
    assert out is not None
    assert "28ed-81ac" in out and "28ed-81d9" in out and "… 3 more, ids 28ed-81d9 7" in out


def test_a_cut_list_of_plain_values_keeps_its_count_only() -> None:
    out = _json('{"tags": ["a", "b", "c"], "flags": [true, false]}', 2)
    assert out == '{"tags":["a","… 2 more"],"flags":[true,"… 1 more"]}'
