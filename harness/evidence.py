"""The evidence a run gathers: ``[evidence]`` of a series' ``series.toml``, ``--contrast`` options, device defaults.

Everything that is a fact about one patch series lives in its ``series.toml`` (docs/new-series.md)::

    [evidence]
    markers = ["MY_NEW_VARIABLE"]           # in the patched libraries, absent from stock (older name: top-level env)
    test_requirements = ["pytest<9", "expecttest", "hypothesis", "numpy"]  # pip-installed for [[evidence.test]]
    workload = "workload.py"                # the series' own ops and cells (harness.bench.plugins), in its folder

    [evidence.mps]                          # one table per device
    configs = ["vanilla", "all"]            # the configs compare runs by default on this device
    consistency = ["all", "vanilla"]        # GEMM outputs of these two configs of one build must agree
    routes = { all = { mm = "metal" } }     # config -> op -> kernel path (accuracy bounds); the looser path
                                            # where builds differ; a [[base]] with [base.routes.mps] overrides
    patched_routes = { all = { mm = "default" } }  # what the patch changes, on builds carrying the series
    [evidence.mps.env.all]                  # configs the series adds to the device's generic ones
    PYTORCH_MPS_PREFER_METAL = "1"
    MY_NEW_VARIABLE = "1"

    [[evidence.contrast]]                   # (build, config) vs (build, config) over ops, with a claim
    a = "patched/all"
    b = "stock/vanilla"
    ops = ["mm", "addmm"]                   # optional; dtypes = [...] optional
    claim = "equivalent"                    # faster | unchanged | equivalent | none

    [[evidence.test]]                       # an upstream test selection run on both builds
    name = "new test"
    file = "test/test_mps.py"
    k = "TestMyVariable"                    # optional pytest -k expression
    env = { PYTORCH_MPS_PREFER_METAL = "1" } # optional
    expect = { stock = "fail", patched = "pass" }
    fails_with = "AssertionError: Tensor-likes are not equal!"  # optional: how the expected failure's first line starts

The same contrast on the command line: ``--contrast 'patched/all vs stock/vanilla : mm,addmm : equivalent'``
(:func:`parse_contrast`). This module is pure data (no torch, no filesystem). The ``[evidence]`` table is
parsed once, by :func:`validate` while :func:`harness.manifest.load_series` loads the manifest, into the
:class:`Evidence` a :class:`harness.manifest.Series` carries; every other shape derives from that object:
:func:`for_run` adds a run's ``--contrast`` options and the series' bases, :meth:`Evidence.to_json` is what
``results.json`` records under ``evidence``, and :meth:`Evidence.from_json` is how readers of a run get it
back. The series' markers (the strings its patched libraries contain and stock's lack) are
:attr:`Evidence.markers` everywhere: a build verifies its wheels against them, the provenance probe looks
for them in each build's libraries (``python -m harness.bench.provenance --markers``; results.json records what it
found under ``variables_in_libraries``) and the report shows them. A manifest declares them as
``[evidence] markers``; the top-level ``env`` of older manifests is read as the same list.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from packaging.requirements import InvalidRequirement, Requirement

from harness import configs as cfg
from harness.errors import UsageError

#: what a contrast claims about A against B (speedup = B time / A time)
CLAIMS = ("faster", "unchanged", "equivalent", "none")
#: claims tested as equivalence: every cell's CI inside the ±band (stats.judge's INSIDE_BAND rule)
EQUIVALENCE_CLAIMS = ("unchanged", "equivalent")
#: outcomes a series test may be expected to have on a build (pytest's junit results)
OUTCOMES = ("pass", "fail", "skip")

_DEVICE_KEYS = {
    "configs": list,
    "consistency": list,
    "routes": dict,
    "patched_routes": dict,
    "env": dict,
    "about": dict,
}
_CONTRAST_KEYS = {"a": str, "b": str, "ops": list, "dtypes": list, "claim": str, "name": str, "means": dict}
#: the outcomes a contrast's ``means`` may say what they mean for (harness.contrasts' words)
MEANS_KEYS = ("shown", "not_shown", "contradicted")
#: the build names a run gives its builds (compare: stock, patched; bench: build): what ``expect`` may name
TEST_BUILDS = ("stock", "patched", "build")
#: the longest ``fails_with`` (the start of a failure's first line; seriestests keeps 200 characters of it)
FAILS_WITH_CHARS = 200
_TEST_KEYS = {"name": str, "file": str, "k": str, "env": dict, "expect": dict, "fails_with": str}
_TOP_KEYS = ("markers", "contrast", "test", "test_requirements", "workload", *cfg.DEVICES)


class EvidenceError(ValueError):
    """A malformed ``[evidence]`` entry or ``--contrast``: ``str(exc)`` names the key and what is wrong."""


@dataclass(frozen=True)
class Side:
    """One side of a contrast: a build (``stock``, ``patched``, ``build``) under one env config."""

    build: str
    config: str

    @property
    def label(self) -> str:
        return f"{self.build}/{self.config}"


@dataclass(frozen=True)
class Contrast:
    """A vs B over the cells of ``ops`` (all when empty) and ``dtypes`` (all when empty).

    ``claim``: ``faster`` (A faster than B, every cell's CI beyond the band), ``unchanged`` (same
    config, two builds) or ``equivalent`` (any two sides): every cell's CI inside the band; ``none``:
    the numbers only. Speedup = B time / A time (> 1: A faster). ``means``: per outcome (``shown``,
    ``not_shown``, ``contradicted``) one sentence saying what it means for the series (the report's
    consequence line; without one the report words the claim itself).
    """

    a: Side
    b: Side
    ops: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    claim: str = "none"
    name: str = ""
    means: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        return self.name or f"{self.a.label} vs {self.b.label}"

    def meaning(self, outcome: str) -> str | None:
        """The declared sentence for an outcome (``shown``, ``not shown``, ``contradicted``), or None."""
        return dict(self.means).get(outcome.replace(" ", "_"))

    def covers(self, op: str, dtype: str) -> bool:
        return (not self.ops or op in self.ops) and (not self.dtypes or dtype in self.dtypes)

    def to_json(self) -> dict:
        return {
            "a": self.a.label,
            "b": self.b.label,
            "ops": list(self.ops),
            "dtypes": list(self.dtypes),
            "claim": self.claim,
            "name": self.name,
            **({"means": dict(self.means)} if self.means else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping) -> Contrast:
        return contrast_from_table(dict(d), "contrast")


@dataclass(frozen=True)
class SeriesTest:
    """An upstream test selection (pytest ``file`` [``-k k``]) with variables ``env`` and the outcome
    expected on each build (``pass``/``fail``/``skip``). ``fails_with``: plain text that the first line
    of each failing test's message must start with (pytest's junit ``<failure message>``, e.g.
    ``AssertionError: Tensor-likes are not equal!``) where ``fail`` is expected; empty: any assertion
    failure counts, and the report says the expected failure was not declared
    (:func:`harness.seriestests.judge`)."""

    name: str
    file: str
    k: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    expect: Mapping[str, str] = field(default_factory=dict)
    fails_with: str = ""

    def to_json(self) -> dict:
        out = {"name": self.name, "file": self.file, "k": self.k, "env": dict(self.env), "expect": dict(self.expect)}
        return out | ({"fails_with": self.fails_with} if self.fails_with else {})


@dataclass(frozen=True)
class Evidence:
    """What one run gathers beyond the device's generic configs (see the module docstring).

    Attributes:
        series: the series' name, or None (a run without ``--series`` or series-built wheels).
        markers: strings the patched libraries contain and stock's lack.
        device: device -> its ``[evidence.<device>]`` table, validated (configs, consistency, routes, env, about).
        contrasts: declared contrasts (series and ``--contrast``), in order.
        tests: the series' upstream test selections.
        test_requirements: pip requirements the tests need in each build's environment (harness.seriestests).
        workload: the series' workload module: ``{"file": name in the series folder}`` as declared; a run's adds
            ``path``, ``sha256``, ``ops`` and ``flop`` (:func:`harness.bench.plugins.describe`); ``{}``: none.
    """

    series: str | None = None
    markers: tuple[str, ...] = ()
    device: Mapping[str, Mapping] = field(default_factory=dict)
    contrasts: tuple[Contrast, ...] = ()
    tests: tuple[SeriesTest, ...] = ()
    test_requirements: tuple[str, ...] = ()
    #: the series' bases: ``{"ref", "commit", "hash", "accumulators", "routes"}`` each (``hash``: the series
    #: hash of that base's patches; ``accumulators``: kernel path -> ``{"accumulator", "source"}``;
    #: ``routes``: device -> config -> op -> path on that base's upstream code; series.toml)
    bases: tuple[Mapping, ...] = ()
    workload: Mapping = field(default_factory=dict)

    def base_of(self, builds: Mapping[str, Mapping]) -> dict[str, dict]:
        """Which of the series' bases each build is on, and how that is known: build name ->
        ``{"ref": ref or None, "how": one line, "patched": whether the build carries the series' patches
        (True: told by its series hash; False: told by the base commit or release; None: not known)}``.
        ``builds``: results.json ``builds`` entries (their ``build`` manifest and ``provenance.torch_version``).

        Told by, in order: the build manifest's series hash (a patched build of that base's patches) or
        base commit (a ``[[base]] commit``); the torch version's local label (``+<series>.<hash[:8]>``,
        ``+stock.<commit[:8]>``); a release version ``X.Y.Z`` with no label against a ``vX.Y.Z`` ref;
        then a build whose manifest names the same base commit as a build told above. Otherwise None:
        the check uses the base-independent (looser) bound and the report says so."""
        out = {name: _base_by_identity(self.bases, build) for name, build in builds.items()}
        for name, build in builds.items():
            sha = _manifest(build).get("base_sha")
            if out[name]["ref"] is None and sha:
                twin = next(
                    (n for n, b in builds.items() if out[n]["ref"] and _manifest(b).get("base_sha") == sha), None
                )
                if twin:
                    out[name] = {
                        "ref": out[twin]["ref"],
                        "how": f"same base commit {sha[:12]} as {twin}",
                        "patched": None,
                    }
        return out

    def accumulators(self, ref: str | None) -> dict[str, str]:
        """Kernel path -> accumulator on base ``ref`` (series.toml ``[base.accumulators]``) for every path
        any base states; ``unknown`` (:data:`harness.bench.accuracy.UNKNOWN`) where that base does not
        state it (e.g. a base ``rebase`` added, not yet read) or, with no base told (None), where the
        series' bases disagree."""
        paths = {p for b in self.bases for p in b.get("accumulators", {})}
        for base in self.bases:
            if base["ref"] == ref:
                own = base.get("accumulators", {})
                return {p: own[p]["accumulator"] if p in own else "unknown" for p in sorted(paths)}
        out = {}
        for path in sorted(paths):
            seen = {b.get("accumulators", {}).get(path, {}).get("accumulator") for b in self.bases}
            out[path] = seen.pop() if len(seen) == 1 and None not in seen else "unknown"
        return out

    def routes_of(self, device: str, ref: str | None, patched: bool | None) -> dict[str, dict[str, str]] | None:
        """Config -> op -> kernel path on one build of base ``ref`` (``patched``: whether it carries the
        series' patches; :meth:`base_of`), exact for that build: the base's ``[base.routes.<device>]`` for
        every config of the device (ops not named: ``default``), with ``[evidence.<device>] patched_routes``
        laid over them where ``patched``. None where it cannot be exact: no base told, the base states no
        routes for the device, or ``patched`` unknown while the series declares ``patched_routes``; the
        build then keeps the series-wide routes (the looser path where builds differ)."""
        base = next((b for b in self.bases if ref is not None and b["ref"] == ref), None)
        own = (base or {}).get("routes", {}).get(device)
        if own is None:
            return None
        over = self.device.get(device, {}).get("patched_routes", {})
        if over and patched is None:
            return None
        return {
            c.name: {**own.get(c.name, {}), **(over.get(c.name, {}) if patched else {})} for c in self.profiles(device)
        }

    def profiles(self, device: str) -> tuple[cfg.EnvConfig, ...]:
        """The device's env configs: the generic ones (:data:`harness.configs.PROFILES`) and the series'
        own, each with the series' routes for it."""
        table = self.device.get(device, {})
        routes = table.get("routes", {})
        about = table.get("about", {})
        out = [
            cfg.EnvConfig(c.name, c.env, c.about, c.reduced_fp32, routes.get(c.name, c.routes))
            for c in cfg.PROFILES[device]
        ]
        for name, env in table.get("env", {}).items():
            out.append(
                cfg.EnvConfig(name, dict(env), about.get(name, "declared by the series"), routes=routes.get(name, {}))
            )
        return tuple(out)

    def default_configs(self, device: str) -> tuple[str, ...]:
        """Configs a compare runs when ``--configs`` is not given: the series' list, else every profile."""
        return tuple(self.device.get(device, {}).get("configs") or (c.name for c in self.profiles(device)))

    def consistency_pair(self, device: str) -> tuple[str, str] | None:
        pair = self.device.get(device, {}).get("consistency")
        return tuple(pair) if pair else cfg.CONSISTENCY_PAIRS.get(device)

    def to_json(self) -> dict:
        return {
            "series": self.series,
            "markers": list(self.markers),
            "device": {d: _plain(t) for d, t in self.device.items()},
            "contrasts": [c.to_json() for c in self.contrasts],
            "tests": [t.to_json() for t in self.tests],
            "test_requirements": list(self.test_requirements),
            "bases": [_plain(b) for b in self.bases],
        } | ({"workload": _plain(self.workload)} if self.workload else {})

    @classmethod
    def from_json(cls, d: Mapping | None) -> Evidence:
        """The evidence a results.json recorded (``{}``/None: none, as in runs before it existed)."""
        if not d:
            return cls()
        return cls(
            d.get("series"),
            tuple(d.get("markers", ())),
            dict(d.get("device", {})),
            tuple(Contrast.from_json(c) for c in d.get("contrasts", ())),
            tuple(
                SeriesTest(
                    t["name"], t["file"], t.get("k", ""), t.get("env", {}), t.get("expect", {}), t.get("fails_with", "")
                )
                for t in d.get("tests", ())
            ),
            tuple(d.get("test_requirements", ())),
            tuple(d.get("bases", ())),
            dict(d.get("workload") or {}),
        )


def _manifest(build: Mapping) -> Mapping:
    manifest = build.get("build")
    return manifest if isinstance(manifest, Mapping) else {}


def _label_segment(digest: str) -> str:
    """The 8 hex digits as a local version label carries them (harness.build._hex_segment)."""
    head = digest[:8].lower()
    return f"g{head}" if head.isdigit() and head.startswith("0") else head


def _base_by_identity(bases: tuple[Mapping, ...], build: Mapping) -> dict:
    """The base one build's own records name (see :meth:`Evidence.base_of`), or ``{"ref": None, ...}``."""
    manifest = _manifest(build)
    series = manifest.get("series") if isinstance(manifest.get("series"), Mapping) else {}
    version = str((build.get("provenance") or {}).get("torch_version") or "")
    release, _, label = version.partition("+")
    for base in bases:
        if series.get("hash") and series["hash"] == base.get("hash"):
            return {"ref": base["ref"], "how": f"build manifest: series hash {base['hash'][:8]}", "patched": True}
        if base.get("commit") and manifest.get("base_sha") == base["commit"]:
            return {"ref": base["ref"], "how": f"build manifest: base commit {base['commit'][:12]}", "patched": False}
        parts = label.split(".")
        if base.get("hash") and len(parts) > 1 and parts[-1] == _label_segment(base["hash"]) and parts[0] != "stock":
            return {
                "ref": base["ref"],
                "how": f"torch version {version}: series hash {base['hash'][:8]}",
                "patched": True,
            }
        if base.get("commit") and parts[:1] == ["stock"] and parts[-1] == _label_segment(base["commit"]):
            return {
                "ref": base["ref"],
                "how": f"torch version {version}: base commit {base['commit'][:8]}",
                "patched": False,
            }
        if not label and re.fullmatch(r"\d+\.\d+\.\d+", release) and base["ref"] == f"v{release}":
            return {"ref": base["ref"], "how": f"torch release {release}", "patched": False}
    refs = ", ".join(b["ref"] for b in bases) or "none declared"
    return {"ref": None, "how": f"torch {version or '?'} names none of the series' bases ({refs})", "patched": None}


def _plain(x):
    if isinstance(x, Mapping):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def _type(where: str, value, kind: type) -> None:
    if not isinstance(value, kind):
        wanted = "table" if kind is dict else kind.__name__
        raise EvidenceError(f"{where} must be a {wanted}, not {type(value).__name__}")


def _strings(where: str, value) -> tuple[str, ...]:
    _type(where, value, list)
    if not all(isinstance(v, str) and v for v in value):
        raise EvidenceError(f"{where} must list non-empty strings")
    return tuple(value)


def _is_requirement(text: str) -> bool:
    try:
        Requirement(text)
    except InvalidRequirement:
        return False
    return True


def _keys(where: str, table: dict, allowed: Mapping[str, type], required: tuple[str, ...] = ()) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise EvidenceError(f"{where}: unknown key {unknown[0]!r} (keys: {', '.join(allowed)})")
    missing = [k for k in required if k not in table]
    if missing:
        raise EvidenceError(f"{where}: key {missing[0]!r} is missing")
    for key, kind in allowed.items():
        if key in table:
            _type(f"{where} key {key!r}", table[key], kind)


def _side(where: str, text: str) -> Side:
    build, sep, config = text.strip().partition("/")
    if not sep or not build.strip() or not config.strip():
        raise EvidenceError(f"{where}: {text!r} is not BUILD/CONFIG (e.g. patched/all, stock/vanilla)")
    return Side(build.strip(), config.strip())


def contrast_from_table(table: dict, where: str) -> Contrast:
    """One ``[[evidence.contrast]]`` table (or its JSON) -> :class:`Contrast`.

    Raises:
        EvidenceError: unknown/missing key, a side that is not BUILD/CONFIG, an unknown claim, A == B.
    """
    _keys(where, table, _CONTRAST_KEYS, ("a", "b"))
    claim = table.get("claim", "none")
    if claim not in CLAIMS:
        raise EvidenceError(f"{where}: claim {claim!r} is not one of {', '.join(CLAIMS)}")
    a, b = _side(f"{where} key 'a'", table["a"]), _side(f"{where} key 'b'", table["b"])
    if a == b:
        raise EvidenceError(f"{where}: both sides are {a.label}; a contrast compares two different (build, config)")
    ops = _strings(f"{where} key 'ops'", table.get("ops", []))
    dtypes = _strings(f"{where} key 'dtypes'", table.get("dtypes", []))
    means = table.get("means", {})
    bad = [k for k, v in means.items() if k not in MEANS_KEYS or not (isinstance(v, str) and v.strip())]
    if bad:
        raise EvidenceError(
            f"{where} key 'means': {bad[0]!r} is not one of {', '.join(MEANS_KEYS)} with a sentence "
            '(e.g. means = { shown = "…", not_shown = "…", contradicted = "…" })'
        )
    ordered = tuple((k, " ".join(means[k].split())) for k in MEANS_KEYS if k in means)
    return Contrast(a, b, ops, dtypes, claim, table.get("name", ""), ordered)


def _test_from_table(table: dict, where: str) -> SeriesTest:
    _keys(where, table, _TEST_KEYS, ("name", "file", "expect"))
    expect = table["expect"]
    bad = [f"{b} = {o!r}" for b, o in expect.items() if o not in OUTCOMES]
    stray = [b for b in expect if b not in TEST_BUILDS]
    if stray:  # a misspelt build would run the test and judge nothing
        close = difflib.get_close_matches(stray[0], TEST_BUILDS, n=1)
        raise EvidenceError(
            f"{where} key 'expect': {stray[0]!r} is not a build ({', '.join(TEST_BUILDS)}: compare's, bench's"
            + (f"; did you mean {close[0]!r}?)" if close else ")")
        )
    if bad or not expect:
        raise EvidenceError(
            f"{where} key 'expect': {', '.join(bad) or 'empty'}; write build = "
            f"{' | '.join(repr(o) for o in OUTCOMES)}, e.g. {{ stock = \"fail\", patched = \"pass\" }}"
        )
    file = table["file"]
    if file.startswith("/") or ".." in file.split("/"):
        raise EvidenceError(
            f"{where} key 'file': {file!r} must be a path inside the source tree " "(e.g. test/test_mps.py)"
        )
    env = table.get("env", {})
    if not all(isinstance(v, str) for v in env.values()):
        raise EvidenceError(f"{where} key 'env': values must be strings (e.g. {{ PYTORCH_MPS_PREFER_METAL = \"1\" }})")
    _env_names(f"{where} key 'env'", env)
    fails_with = table.get("fails_with", "")
    if fails_with:
        if "fail" not in expect.values():
            raise EvidenceError(f"{where} key 'fails_with': no build is expected to fail (expect = {dict(expect)})")
        if "\n" in fails_with or len(fails_with) > FAILS_WITH_CHARS:
            raise EvidenceError(
                f"{where} key 'fails_with': one line of at most {FAILS_WITH_CHARS} characters, the start of the "
                "expected failure's first line (plain text, not a pattern), "
                'e.g. "AssertionError: Tensor-likes are not equal!"'
            )
    return SeriesTest(table["name"], file, table.get("k", ""), dict(env), dict(expect), fails_with)


def route_problem(where: str, per_op: Mapping) -> None:
    """Every value of one config's ``op = "path"`` table is a kernel path the harness knows
    (:data:`harness.configs.ROUTES`): a misspelt path would silently take the looser bound.

    Raises:
        EvidenceError: the first unknown path, with the known ones.
    """
    for op, path in per_op.items():
        if path not in cfg.ROUTES:
            raise EvidenceError(f"{where}: {op} = {path!r} is not a kernel path ({', '.join(cfg.ROUTES)})")


def _env_names(where: str, env: Mapping) -> None:
    """Every key of a manifest env table is a variable a worker can be given: the ``--env`` rule
    (:func:`harness.configs.env_name_problem`); values NUL-free (``os.environ`` refuses NUL)."""
    for key, value in env.items():
        problem = cfg.env_name_problem(key)
        if problem:
            raise EvidenceError(f"{where}: {problem}")
        if "\0" in value:
            raise EvidenceError(f"{where}: the value of {key} contains a NUL byte")


def _device_table(where: str, table: dict, device: str) -> dict:
    _keys(where, table, _DEVICE_KEYS)
    generic = [c.name for c in cfg.PROFILES[device]]
    taken = [name for name in table.get("env", {}) if name in generic]
    if taken:
        raise EvidenceError(
            f"{where}.env.{taken[0]}: {taken[0]!r} is a generic {device} config "
            f"({', '.join(generic)}); give the series' config its own name"
        )
    for key in ("configs", "consistency"):
        if key in table:
            _strings(f"{where} key {key!r}", table[key])
    if "consistency" in table and len(table["consistency"]) != 2:
        raise EvidenceError(f'{where} key \'consistency\' must name two configs, e.g. ["all", "vanilla"]')
    for name, env in table.get("env", {}).items():
        _type(f"{where}.env.{name}", env, dict)
        if not all(isinstance(v, str) for v in env.values()):
            raise EvidenceError(f"{where}.env.{name}: values must be strings")
        _env_names(f"{where}.env.{name}", env)
    for key in ("routes", "patched_routes"):
        for name, per_op in table.get(key, {}).items():
            _type(f"{where}.{key}.{name}", per_op, dict)
            route_problem(f"{where}.{key}.{name}", per_op)
    return table


def validate(table: Mapping, markers: tuple[str, ...] = (), series: str | None = None) -> Evidence:
    """``[evidence]`` of a manifest -> :class:`Evidence` (``markers``: the markers when the table names none,
    e.g. an older manifest's top-level ``env``).

    Raises:
        EvidenceError: the first malformed key, named by its path (e.g. ``[[evidence.contrast]] #2 key 'claim'``).
    """
    table = dict(table)
    unknown = sorted(set(table) - set(_TOP_KEYS))
    if unknown:
        raise EvidenceError(f"[evidence]: unknown key {unknown[0]!r} (keys: {', '.join(_TOP_KEYS)})")
    devices = {}
    for device in (key for key in table if key in cfg.DEVICES):  # in the manifest's order
        value = table[device]
        if isinstance(value, list):  # the short form: device = [configs]
            value = {"configs": value}
        _type(f"[evidence.{device}]", value, dict)
        devices[device] = _device_table(f"[evidence.{device}]", value, device)
    markers = _strings("[evidence] key 'markers'", table["markers"]) if "markers" in table else tuple(markers)
    contrasts = tuple(
        contrast_from_table(t, f"[[evidence.contrast]] #{i}")
        if isinstance(t, dict)
        else _fail(f"[[evidence.contrast]] #{i} must be a table")
        for i, t in enumerate(table.get("contrast", []), start=1)
    )
    tests = tuple(
        _test_from_table(t, f"[[evidence.test]] #{i}")
        if isinstance(t, dict)
        else _fail(f"[[evidence.test]] #{i} must be a table")
        for i, t in enumerate(table.get("test", []), start=1)
    )
    requirements = _strings("[evidence] key 'test_requirements'", table.get("test_requirements", []))
    bad = [r for r in requirements if not _is_requirement(r)]
    if bad:
        raise EvidenceError(
            f"[evidence] key 'test_requirements': {bad[0]!r} is not a pip requirement (e.g. \"pytest<9\")"
        )
    workload = {}
    if "workload" in table:
        _type("[evidence] key 'workload'", table["workload"], str)
        workload = {"file": table["workload"]}
    return Evidence(series, markers, devices, contrasts, tests, requirements, workload=workload)


def _fail(text: str):
    raise EvidenceError(text)


_CONTRAST_TEXT = re.compile(r"^\s*(?P<a>\S+)\s+vs\s+(?P<b>\S+)\s*(?::(?P<sel>[^:]*))?(?::(?P<claim>[^:]*))?$")


def parse_contrast(text: str) -> Contrast:
    """``--contrast 'A vs B [: SELECTION [: CLAIM]]'`` -> :class:`Contrast`.

    A, B: ``BUILD/CONFIG`` (``stock/tf32_override``); SELECTION: comma-separated ``op`` or
    ``op/dtype`` or ``*/dtype`` items (empty: every cell); CLAIM: one of :data:`CLAIMS` (default none).
    Example: ``stock/tf32_override vs stock/default : mm/float32,addmm/float32 : faster``.

    Raises:
        UsageError: the text does not have that shape, or names an unknown claim.
    """
    match = _CONTRAST_TEXT.match(text)
    example = "e.g. --contrast 'stock/tf32_override vs stock/default : mm/float32 : faster'"
    if not match:
        raise UsageError(f"--contrast {text!r} is not 'A vs B [: ops [: claim]]'", example)
    ops, dtypes = [], []
    for item in filter(None, (s.strip() for s in (match["sel"] or "").split(","))):
        op, _, dtype = item.partition("/")
        if op and op != "*" and op not in ops:
            ops.append(op)
        if dtype and dtype not in dtypes:
            dtypes.append(dtype)
    table = {
        "a": match["a"],
        "b": match["b"],
        "ops": ops,
        "dtypes": dtypes,
        "claim": (match["claim"] or "none").strip() or "none",
    }
    try:
        return contrast_from_table(table, f"--contrast {text!r}")
    except EvidenceError as exc:
        raise UsageError(str(exc), example) from None


def default_contrasts(builds: list[str], configs: list[str]) -> tuple[Contrast, ...]:
    """The contrast family of a run that declares none: patched/C vs stock/C for every config C (no claim)."""
    if builds != ["stock", "patched"]:
        return ()
    return tuple(Contrast(Side("patched", c), Side("stock", c)) for c in configs)


def for_run(found, contrasts: list[str]) -> Evidence:
    """The evidence of a ``compare``/``bench`` run: the :class:`Evidence` of ``found`` (a loaded
    :class:`harness.manifest.Series`, parsed when it loaded; None for a run without a series) plus the
    ``--contrast`` texts and the series' bases (each with the series hash of its patches).

    Raises:
        UsageError: a malformed ``--contrast``.
    """
    extra = tuple(parse_contrast(text) for text in contrasts)
    if not found:
        return Evidence(contrasts=extra)
    bases = tuple(
        {
            "ref": b.ref,
            "commit": b.commit,
            "hash": found.hash_of(b),
            "accumulators": _plain(b.accumulators),
            "routes": _plain(b.routes),
        }
        for b in found.bases
    )
    return replace(found.evidence, contrasts=found.evidence.contrasts + extra, bases=bases)
