"""SWE-bench instances: from the Hugging Face dataset, a local file (JSON, JSONL, parquet) or the project's fixture.

Default selection mirrors the published pilot: the first repository (in dataset order) with at least ``limit``
instances, and its first ``limit`` instances (SWE-bench Lite test: astropy-12907 and astropy-14182).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from harness.core.errors import DataError, MissingFileError, UsageError
from harness.core.extras import needs
from harness.core.jsonl import read_jsonl

DEFAULT_DATASET = "SWE-bench/SWE-bench_Lite"
DEFAULT_SPLIT = "test"
DEFAULT_LIMIT = 2
FIXTURE_FILE = "swebench_lite_fixture.jsonl"
FIXTURE_REPO_FILE = "repo_astropy__astropy.json"


class Instance(BaseModel):
    """One SWE-bench instance (SWE-bench field names; 5.x evaluation fields optional; unknown fields kept)."""

    model_config = ConfigDict(extra="allow")

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str = ""
    hints_text: str = ""
    version: str | None = None
    created_at: str | None = None
    patch: str | None = None
    test_patch: str | None = None
    FAIL_TO_PASS: list[str] | str | None = None
    PASS_TO_PASS: list[str] | str | None = None
    environment_setup_commit: str | None = None
    text: str | None = None
    """A text dataset's ready prompt (oracle / BM25 style); used verbatim when present."""
    image: str | None = None
    eval_script: str | None = None
    log_parser: str | None = None
    eval_type: str | None = None
    fixture_kind: str | None = None
    official_text: bool | None = None

    @field_validator("hints_text", "problem_statement", mode="before")
    @classmethod
    def _none_to_empty(cls, v: Any) -> Any:
        return "" if v is None else v

    @property
    def repo_dirname(self) -> str:
        """``owner__name``: the folder of this repository under ``--repos-dir``."""
        return self.repo.replace("/", "__")

    @property
    def is_fixture(self) -> bool:
        return bool(self.fixture_kind)

    def manifest_entry(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "repo": self.repo,
            "base_commit": self.base_commit,
            "version": self.version,
            "has_text": bool(self.text),
            "fixture_kind": self.fixture_kind,
            "official_text": self.official_text,
        }


def fixture_path(name: str = FIXTURE_FILE) -> Path:
    return Path(str(resources.files("pilots.swebench").joinpath("fixtures", name)))


def load_file(path: str | Path) -> list[Instance]:
    """Instances from ``.json`` (a list, or ``{"instances": [...]}``), ``.jsonl`` or ``.parquet``."""
    p = Path(path)
    if not p.exists():
        raise MissingFileError(f"instances file not found: {p}", fix="pass --instances FILE (JSON, JSONL or parquet)")
    suffix = p.suffix.lower()
    if suffix == ".jsonl":
        records: list[dict[str, Any]] = read_jsonl(p, allow_torn_tail=False)
    elif suffix == ".json":
        try:
            data = json.loads(p.read_text())
        except json.JSONDecodeError as exc:
            raise DataError(f"{p}: malformed JSON ({exc.msg})", fix="a JSON list of SWE-bench instances") from None
        records = data.get("instances", []) if isinstance(data, dict) else data
    elif suffix == ".parquet":
        with needs(f"reading {p.name}"):
            import pyarrow.parquet as pq  # optional [export] extra: imported only for a parquet file

        records = pq.read_table(p).to_pylist()
    else:
        raise UsageError(f"unsupported instances file {p.name}", fix="use .json, .jsonl or .parquet")
    return validate_records(records, where=str(p))


def validate_records(records: Iterable[dict[str, Any]], *, where: str) -> list[Instance]:
    out = []
    for i, rec in enumerate(records):
        try:
            out.append(Instance.model_validate(rec))
        except ValidationError as exc:
            raise DataError(
                f"{where}: record {i} is not a SWE-bench instance ({exc})",
                fix="each record needs instance_id, repo, base_commit and problem_statement",
            ) from None
    return out


def load_hf(dataset: str = DEFAULT_DATASET, split: str = DEFAULT_SPLIT) -> list[Instance]:
    """SWE-bench Lite through ``datasets`` (works offline only when the dataset is cached)."""
    with needs(f"loading {dataset} from the Hugging Face Hub (or use --instances FILE / --fixture)"):
        import datasets  # optional [export] extra: imported only for the Hub
    try:
        ds = datasets.load_dataset(dataset, split=split)
    except Exception as exc:  # noqa: BLE001 - the Hub/cache raise many types; each becomes one DataError with a fix
        raise DataError(
            f"cannot load {dataset} [{split}] through datasets: {type(exc).__name__}: {str(exc)[:200]}",
            fix="use --instances FILE (JSON/JSONL/parquet with SWE-bench fields) or --fixture offline",
        ) from None
    return validate_records((dict(r) for r in ds), where=f"{dataset}[{split}]")


def select(
    instances: list[Instance],
    *,
    limit: int | None = DEFAULT_LIMIT,
    instance_ids: list[str] | None = None,
    repo: str | None = None,
) -> list[Instance]:
    """Exactly ``instance_ids`` (in the order given) or the first repo with >= ``limit`` instances, first ``limit``."""
    if instance_ids:
        by_id = {i.instance_id: i for i in instances}
        unknown = [i for i in instance_ids if i not in by_id]
        if unknown:
            raise UsageError(
                f"unknown instance ids: {', '.join(unknown)}", fix="check --instance-ids against the dataset"
            )
        chosen = [by_id[i] for i in dict.fromkeys(instance_ids)]
        return chosen[:limit] if limit else chosen
    pool = [i for i in instances if repo is None or i.repo == repo]
    if not pool:
        raise UsageError(
            f"no instances{' for repo ' + repo if repo else ''}", fix="check --repo and the instances source"
        )
    if not limit:
        return pool
    groups: dict[str, list[Instance]] = {}
    for inst in pool:
        groups.setdefault(inst.repo, []).append(inst)
    for members in groups.values():
        if len(members) >= limit:
            return members[:limit]
    raise UsageError(f"no repository has {limit} instances", fix="lower --limit or pass --instance-ids")
