"""Report files: reading one (a bad file is a one-line ``ReportError``, not a traceback) and writing the JSON,
Markdown and HTML files atomically, so an interrupted run never leaves a truncated report. No torch import."""

from __future__ import annotations

import errno
import gzip
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from pytest_fullgraph.report.schema import JSON_NAME, MARKDOWN_NAME, Report, ReportError

#: The first bytes of a gzip stream: reports are read gzipped or not, whatever their name says.
GZIP_MAGIC = b"\x1f\x8b"


def load(path: str | Path) -> Report:
    """The report in ``path``, plain or gzipped (the committed measurements are kept gzipped); a file that cannot
    be read, is not JSON or is not a report raises ``ReportError`` naming the file, which the command line prints
    as one line."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ReportError(f"{path}: cannot read ({error.strerror or error})") from None
    if raw.startswith(GZIP_MAGIC) or path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as error:
            raise ReportError(f"{path}: cannot read as gzip ({error})") from None
    try:
        data = json.loads(raw)  # bytes in any of JSON's encodings; other bytes are a ValueError too
    except ValueError as error:
        raise ReportError(f"{path}: not valid JSON ({error})") from None
    return Report.from_dict(data, str(path))


def distinct(paths: Iterable[str | Path]) -> list[Path]:
    """``paths`` as given, when no file is among them twice (compared resolved: ``a.json`` and ``./a.json`` are one
    file); a file given twice raises ``ReportError``, since merging a report with itself is a mistake in the command
    (a glob that overlaps a name), not a merge."""
    seen: dict[Path, Path] = {}
    for path in map(Path, paths):
        earlier = seen.setdefault(path.resolve(), path)
        if earlier is not path:
            same = "twice" if str(earlier) == str(path) else f"twice (as {earlier} and {path})"
            raise ReportError(f"{path}: the same report given {same}; give each report once")
    return list(seen.values())


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write through a temporary file and rename, so an interrupted run never leaves a truncated file.

    The file gets the mode any file the user writes gets (0666 less the umask), not the temporary file's 0600. An
    ``OSError`` names ``path``, never the temporary file: the user gave one and has never heard of the other.
    """
    if path.is_dir():  # os.replace would say so of the temporary file
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = ""
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(handle, "wb" if isinstance(text, bytes) else "w") as stream:
            stream.write(text)
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except OSError as error:
        _remove(temporary)
        raise OSError(error.errno, error.strerror, str(path)) from None  # the subclass of its errno, as raised
    except BaseException:
        _remove(temporary)
        raise


def _remove(temporary: str) -> None:
    if temporary:
        Path(temporary).unlink(missing_ok=True)


def save(report: Report, path: Path) -> None:
    """``report`` as one JSON file at ``path`` (sorted keys, gzipped when the name ends in ``.gz``, as the committed
    reports are kept), written atomically: a baseline rewritten or a committed report updated in place."""
    text = json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n"
    write_atomic(path, gzip.compress(text.encode(), mtime=0) if path.suffix == ".gz" else text)


def write(report: Report, directory: str | Path, *, baseline: Report | None = None,
          baseline_name: str = "the baseline") -> list[Path]:
    """``fullgraph-report.json`` (sorted keys: diffs of two runs stay readable), ``fullgraph-report.md`` and
    ``fullgraph-report.html`` (both of which, given ``baseline``, also show what changed against it) in ``directory``,
    created if need be; the paths written."""
    # the renderers load here, not with the module: reading, merging or gating a report renders nothing
    from pytest_fullgraph.report.html import HTML_NAME, html
    from pytest_fullgraph.report.render import markdown

    directory = Path(directory)
    json_path, markdown_path, html_path = directory / JSON_NAME, directory / MARKDOWN_NAME, directory / HTML_NAME
    write_atomic(json_path, json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n")
    write_atomic(markdown_path, markdown(report, baseline))
    write_atomic(html_path, html(report, baseline, baseline_name=baseline_name))
    return [json_path, markdown_path, html_path]
