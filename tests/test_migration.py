"""Old-run compatibility lives in one place, the migration of harness.document (as asv's
``update_to_2``), so readers see only the current shape; an older results.json re-renders through it.

The examples' results.json files are committed as they were before this change (f27b9dd; their files are
never edited: tests/test_examples.py), so each is an older document: it goes through
:func:`harness.document.migrate` and must render byte for byte as its committed report.md, except for
the differences listed in :data:`LISTED_DIFFERENCES` (none so far).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from harness import document as doc
from harness import report
from harness import results as res
from harness.errors import ResultsError

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "docs" / "examples").glob("*/results.json"))
CPU_AB = Path(__file__).resolve().parent.parent / "docs" / "examples" / "cpu-ab" / "results.json"

#: example -> (committed line, line rendered through the migration): a difference the migration makes on purpose
LISTED_DIFFERENCES: dict[str, list[tuple[str, str]]] = {}


def _differences(committed: str, rendered: str) -> list[tuple[str, str]]:
    a, b = committed.splitlines(), rendered.splitlines()
    assert len(a) == len(b), "a migrated example renders a different number of lines"
    return [(x, y) for x, y in zip(a, b, strict=True) if x != y]


@pytest.mark.parametrize("results", EXAMPLES, ids=lambda p: p.parent.name)
def test_each_committed_example_renders_through_the_migration(results):
    raw = json.loads(results.read_text())
    run = doc.from_json(raw, str(results))
    assert run.data is not raw and run.data["schema_version"] == res.SCHEMA_VERSION
    committed = (results.parent / "report.md").read_text()
    assert _differences(committed, report.render(run)) == LISTED_DIFFERENCES.get(results.parent.name, [])


def test_the_examples_hold_documents_of_every_migrated_age():
    """What the migration covers is not hypothetical: the oldest example (h200-aa) predates the recorded
    markers and timed the GPU with device events; the others record both."""
    runs = {p.parent.name: json.loads(p.read_text()) for p in EXAMPLES}
    assert "evidence" not in runs["h200-aa"]
    assert doc.from_json(runs["h200-aa"]).header.clock == "device events"
    assert all("markers" in r["evidence"] for name, r in runs.items() if name != "h200-aa")


def _cpu_ab() -> dict:
    return json.loads(CPU_AB.read_text())


def test_settle_s_of_earlier_harness_versions_becomes_untimed_load():
    older = _cpu_ab()
    older["run"]["timing"]["settle_s"] = 0.1
    frozen = json.dumps(older, sort_keys=True)
    run = doc.from_json(older)
    assert "settle_s" not in run.header.timing and run.header.timing["untimed_load_s"] == 0.1
    assert json.dumps(older, sort_keys=True) == frozen  # the input is not changed
    assert ", after 0.1 s of untimed load" in report.render(run)
    assert "untimed load" not in report.render(doc.from_json(_cpu_ab()))


def test_runs_before_markers_were_recorded_get_the_libraries_variables_no_generic_config_sets():
    older = _cpu_ab()
    del older["evidence"]
    for build in older["builds"].values():
        build["provenance"]["variables_in_libraries"] = {"MY_SERIES_VAR": True, "ATEN_CPU_CAPABILITY": True}
    run = doc.from_json(older)
    assert run.evidence.markers == ("MY_SERIES_VAR",)
    assert "| series marker in libraries | MY_SERIES_VAR: yes | MY_SERIES_VAR: yes |" in report.render(run)


def test_the_clock_words_name_older_device_event_timers():
    older = _cpu_ab()
    for proc in older["processes"]:
        for rec in proc["cells"].values():
            if rec.get("measurement"):
                rec["measurement"]["method"] = "cuda-events"
    assert doc.from_json(older).header.clock == "device events"
    assert doc.from_json(_cpu_ab()).header.clock == "host clock"
    assert doc.clock_words([]) == "host clock"


def test_an_unset_plant_k_reads_as_none_and_a_set_one_as_itself():
    data = _cpu_ab()
    data["run"].pop("plant_k", None)
    assert doc.from_json(data).header.plant_k is None
    data["run"]["plant_k"] = 0.05
    assert doc.from_json(data).header.plant_k == 0.05


def test_a_document_of_an_unknown_version_is_refused_not_migrated():
    with pytest.raises(ResultsError, match="schema version 7"):
        doc.migrate({**_cpu_ab(), "schema_version": 7})


def test_the_migrated_document_shares_nothing_a_reader_could_change():
    """The typed values are frozen and the migration leaves its input as it was (a reader cannot reach
    back into another reader's document)."""
    data = _cpu_ab()
    before = copy.deepcopy(data)
    run = doc.from_json(data)
    with pytest.raises(TypeError):
        run.header.timing["measure_s"] = 1.0  # a read-only mapping
    with pytest.raises(TypeError):
        run.by_cell[next(iter(run.by_cell))] = ()
    assert data == before
