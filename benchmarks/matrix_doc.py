"""The matrix as Markdown: the table, the run's context, and its place in docs/benchmarks.md.

Pure functions; ``benchmarks/run.py`` gathers what they render. The block between
``START`` and ``END`` in the page is replaced whole on each run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from matrix import CLIENT_LABELS, NEUTRAL, OURS, OWN, PEER, Figures, Outcome, Rows, ratios
from matrix_targets import Verdict, cpu_verdicts, timing_verdicts

START = "<!-- bench-matrix:start -->"
END = "<!-- bench-matrix:end -->"

HEADER = (
    "| point | server | initial s | load-gen saturation | server CPU s, initial "
    "| push s from command (median) | load-gen saturation | push s from cache set (median) "
    "| server CPU s per push | peak RSS MB | KB per stream |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


@dataclass(frozen=True, kw_only=True)
class Context:
    """Where, when and how the matrix was measured."""

    date: str
    commit: str
    machine: str
    peer: str
    load: str
    commands: Sequence[str]


def cpu_model(cpuinfo: str) -> str:
    """The CPU's model name from the text of /proc/cpuinfo."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return "unknown CPU"


MISSING = "\N{EN DASH}"


def _number(value: float | None, digits: int) -> str:
    return MISSING if value is None else f"{value:.{digits}f}"


def _times(value: float | None) -> str:
    return MISSING if value is None else f"{value:.2f}\N{MULTIPLICATION SIGN}"


def figure_row(point: str, server: str, outcome: Outcome) -> str:
    """One server's row: its figures, or the reason it has none across the row."""
    if isinstance(outcome, str):
        reason = outcome.replace("|", "\\|").replace("\n", " ")
        return f"| {point} | {server} | {reason} | | | | | | | | |"
    return (
        f"| {point} | {server} | {outcome.initial_s:.2f} | {outcome.initial_saturation:.2f} "
        f"| {outcome.initial_cpu_s:.3f} | {outcome.push_s:.3f} | {outcome.push_saturation:.2f} "
        f"| {outcome.push_from_set_s:.3f} | {outcome.cpu_per_push_s:.3f} "
        f"| {outcome.peak_rss_mb:.0f} "
        f"| {_number(outcome.per_stream_kb, 1)} |"
    )


def ratio_row(peer: Figures, ours: Figures) -> str:
    """The peer's figures over ours; saturations are not compared."""
    r = ratios(peer, ours)
    return (
        f"| | {PEER} / {OURS} | {_times(r['initial_s'])} | | {_times(r['initial_cpu_s'])} "
        f"| {_times(r['push_s'])} | "
        f"| {_times(r['push_from_set_s'])} | {_times(r['cpu_per_push_s'])} "
        f"| {_times(r['peak_rss_mb'])} "
        f"| {_times(r['per_stream_kb'])} |"
    )


def table(rows: Rows) -> str:
    """Each point's servers in the order given, then their ratio when both have figures."""
    lines = [HEADER]
    for point, outcomes in rows:
        label = f"{point.label} ({point.pushes} pushes)"
        for server, outcome in outcomes.items():
            lines.append(figure_row(label, server, outcome))
            label = ""
        ours, peer = outcomes.get(OURS), outcomes.get(PEER)
        if isinstance(ours, Figures) and isinstance(peer, Figures):
            lines.append(ratio_row(peer, ours))
    return "\n".join(lines)


def _share(part: float | None, whole: float) -> str:
    if part is None:
        return MISSING
    return f"{part:.3f} ({part / whole:.0%})" if whole > 0 else f"{part:.3f}"


def kernel_table(rows: Rows) -> str:
    """Of each server's CPU seconds, the kernel's (system time): what the same reads,
    writes and wake-ups cost whatever the server does in between. Empty when no figures
    carry it."""
    lines = []
    for point, outcomes in rows:
        for server, outcome in outcomes.items():
            if isinstance(outcome, Figures) and outcome.initial_sys_s is not None:
                lines.append(
                    f"| {point.label} | {server} "
                    f"| {_share(outcome.initial_sys_s, outcome.initial_cpu_s)} "
                    f"| {_share(outcome.sys_per_push_s, outcome.cpu_per_push_s)} |"
                )
    if not lines:
        return ""
    return (
        "Of the server CPU seconds above, the kernel's (system time, 10 ms ticks):\n\n"
        "| point | server | initial sync | per push |\n|---|---|---|---|\n"
        + "\n".join(lines)
        + "\n\n"
    )


def idle_line(idle_rss_mb: Mapping[str, float]) -> str:
    """The no-stream RSS behind the KB-per-stream column."""
    if not idle_rss_mb:
        return ""
    parts = ", ".join(f"{server} {rss:.1f} MB" for server, rss in idle_rss_mb.items())
    return (
        "RSS of each server serving the R = 100 workload to no stream, subtracted for the "
        f"KB-per-stream column: {parts}.\n\n"
    )


def verdict_line(verdict: Verdict) -> str:
    """One target as a list item: met, missed or not measured, and what was measured."""
    word = {True: "**met**", False: "**missed**", None: "not judged"}[verdict.met]
    return f"* {word}: {verdict.target}: {verdict.measured}."


def section(
    context: Context,
    rows: Mapping[str, Rows],
    idle_rss_mb: Mapping[str, float],
    planned: int,
) -> str:
    """The whole block between the markers: a table per client mode (``rows`` by mode),
    issue 32's targets on the grpc-core clients' rows, issue 17's on the project's own."""
    measured = max((len(mode_rows) for mode_rows in rows.values()), default=0)
    done = "" if measured == planned else f" **Only {measured} of {planned} points measured.**"
    commands = "\n".join(context.commands)
    tables = "".join(
        f"With {CLIENT_LABELS.get(client, client)}:\n\n{table(mode_rows)}\n\n"
        f"{kernel_table(mode_rows)}"
        for client, mode_rows in rows.items()
    )
    judged = []
    if NEUTRAL in rows:
        judged.append(
            (
                "Issue 32's targets (server CPU seconds), on the grpc-core clients",
                cpu_verdicts(rows[NEUTRAL]),
            )
        )
    if OWN in rows:
        judged.append(
            ("Issue 17's targets, on the project's own clients", timing_verdicts(rows[OWN]))
        )
    targets = "".join(
        f"{title}:\n\n" + "\n".join(verdict_line(v) for v in found) + "\n\n"
        for title, found in judged
    )
    return (
        f"{START}\n"
        f"Measured {context.date}, commit `{context.commit}`. Machine: {context.machine}; "
        f"{context.load}. {context.peer}{done}\n\n"
        f"{tables}"
        f"{idle_line(idle_rss_mb)}"
        f"{targets}"
        "Commands, from the repository root (each loadgen line ran once per server and "
        "client mode, with `SERVER` replaced by that server's command and `CLIENT` by the "
        "mode):\n\n"
        f"```sh\n{commands}\n```\n"
        f"{END}"
    )


def replace_block(text: str, block: str) -> str:
    """``text`` with everything from ``START`` to ``END`` (both included) replaced by ``block``."""
    start = text.find(START)
    end = text.find(END, start + len(START)) if start >= 0 else -1
    if start < 0 or end < 0:
        raise ValueError(f"the page has no {START} ... {END} block to replace")
    return text[:start] + block + text[end + len(END) :]
