"""The tables of bench/inference.py: the latency-batching curve and the actors'
memory from the live points, the forward pass and its CPU per env step on
paper; each as text and markdown, with the summary records the results keep."""

from __future__ import annotations

import argparse
import statistics
from typing import Any


def modes(waits: list[float]) -> list[tuple[str, float | None]]:
    """The (inference, max_wait_ms) of every point: local, then central at each wait."""
    return [("local", None)] + [("central", w) for w in waits]


def label(mode: str, wait: float | None) -> str:
    """A point's inference as the tables name it: 'local' or 'central 2 ms'."""
    return "local" if mode == "local" else f"central {wait:g} ms"


def _f(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def _med(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return float(statistics.median(values)) if values else None


class Table:
    def __init__(self, title: str, headers: list[str]):
        self.title, self.headers, self.rows = title, headers, []

    def add(self, *cells: Any) -> None:
        self.rows.append([c if isinstance(c, str) else _f(c) for c in cells])

    def text(self) -> str:
        widths = [max(len(h), *(len(r[i]) for r in self.rows)) for i, h in enumerate(self.headers)]
        line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
        return "\n".join([self.title, line(self.headers)] + [line(r) for r in self.rows])

    def markdown(self) -> str:
        out = [f"**{self.title}**", "", "| " + " | ".join(self.headers) + " |"]
        out.append("|" + "|".join("---:" for _ in self.headers) + "|")
        out += ["| " + " | ".join(r) + " |" for r in self.rows]
        return "\n".join(out)


def summarise(points: list[dict], args: argparse.Namespace) -> tuple[list[Table], list[dict]]:
    curve = Table(
        "Latency-batching curve (medians over repeats; env steps/s total over K actors)",
        [
            "net",
            "K",
            "inference",
            "env steps/s",
            "vs local",
            "actor fwd p50 ms",
            "actor fwd p99 ms",
            "server lat p50 ms",
            "server lat p99 ms",
            "queue p50 ms",
            "batch obs p50",
            "batch obs p90",
            "reqs/batch p50",
            "fwd ms p50",
            "CPU us/step",
        ],
    )
    memory = Table(
        "Memory per actor process (MB, at the group's end; median over actors)",
        [
            "net",
            "K",
            "local RSS",
            "central RSS",
            "saved RSS",
            "local USS",
            "central USS",
            "saved USS",
            "inference proc RSS",
        ],
    )
    summary: list[dict] = []
    for net in args.nets:
        for k in args.actors:
            group = [p for p in points if p["net"] == net and p["actors"] == k]
            if not group:
                continue
            local_rate = None
            for mode, wait in modes(args.waits_ms):
                ps = [p for p in group if p["mode"] == mode and p["wait_ms"] == wait]
                if not ps:
                    continue

                def m(key: str, ps: list[dict] = ps) -> float | None:
                    return _med([p[key] for p in ps])

                def s(key: str, ps: list[dict] = ps) -> float | None:
                    return _med([p["server"].get(f"inference/{key}") for p in ps])

                rate = m("env_steps_per_second")
                if mode == "local":
                    local_rate = rate
                row = {
                    "net": net,
                    "actors": k,
                    "mode": mode,
                    "wait_ms": wait,
                    "repeats": len(ps),
                    "env_steps_per_second": rate,
                    "vs_local": rate / local_rate if rate and local_rate else None,
                    "actor_forward_ms_p50": m("actor_forward_ms_p50"),
                    "actor_forward_ms_p99": m("actor_forward_ms_p99"),
                    "server_latency_ms_p50": s("latency_ms_p50"),
                    "server_latency_ms_p99": s("latency_ms_p99"),
                    "queue_wait_ms_p50": s("queue_wait_ms_p50"),
                    "batch_observations_p50": s("batch_observations_p50"),
                    "batch_observations_p90": s("batch_observations_p90"),
                    "batch_requests_p50": s("batch_requests_p50"),
                    "forward_ms_p50": s("forward_ms_p50"),
                    "cpu_us_per_env_step": m("cpu_us_per_env_step"),
                }
                summary.append(row)
                curve.add(
                    net,
                    str(k),
                    label(mode, wait),
                    _f(rate, 0),
                    _f(row["vs_local"], 2) + "x" if row["vs_local"] else "-",
                    _f(row["actor_forward_ms_p50"], 2),
                    _f(row["actor_forward_ms_p99"], 2),
                    _f(row["server_latency_ms_p50"], 2),
                    _f(row["server_latency_ms_p99"], 2),
                    _f(row["queue_wait_ms_p50"], 2),
                    _f(row["batch_observations_p50"], 0),
                    _f(row["batch_observations_p90"], 0),
                    _f(row["batch_requests_p50"], 1),
                    _f(row["forward_ms_p50"], 2),
                    _f(row["cpu_us_per_env_step"], 0),
                )
            last = max(p["repeat"] for p in group)
            mem = {}
            for mode in ("local", "central"):
                ps = [p for p in group if p["mode"] == mode and p["repeat"] == last]
                mem[mode] = (
                    (_med(ps[-1]["actor_rss_mb"]), _med(ps[-1]["actor_uss_mb"]))
                    if ps
                    else (None,) * 2
                )
            server_rss = _med([p["server_rss_mb"] for p in group if p["repeat"] == last])
            (lr, lu), (cr, cu) = mem["local"], mem["central"]
            memory.add(
                net,
                str(k),
                _f(lr, 0),
                _f(cr, 0),
                _f(lr - cr, 0) if lr and cr else "-",
                _f(lu, 0),
                _f(cu, 0),
                _f(lu - cu, 0) if lu and cu else "-",
                _f(server_rss, 0),
            )
            summary.append(
                {
                    "net": net,
                    "actors": k,
                    "memory_mb": {
                        "local_rss": lr,
                        "central_rss": cr,
                        "local_uss": lu,
                        "central_uss": cu,
                        "inference_process_rss": server_rss,
                    },
                }
            )
    return [curve, memory], summary


def _interp(rows: list[dict], batch: int, key: str) -> float:
    """Per-call `key` at `batch`, linear between the measured sizes around it."""
    pts = sorted((r["batch"], r[key]) for r in rows)
    for (b0, v0), (b1, v1) in zip(pts, pts[1:]):
        if b0 <= batch <= b1:
            return v0 + (v1 - v0) * (batch - b0) / (b1 - b0)
    b, v = pts[-1] if batch > pts[-1][0] else pts[0]
    return v * batch / b


def paper_tables(result: dict, args: argparse.Namespace) -> tuple[list[Table], list[dict]]:
    fwd = Table(
        "Forward pass against batch size (ActingPolicy, random observations; median of repeats)",
        ["net", "batch", "wall ms", "CPU ms", "CPU us/obs"],
    )
    for net, rows in result.items():
        for r in rows:
            fwd.add(
                net,
                str(r["batch"]),
                _f(r["wall_ms"], 3),
                _f(r["cpu_ms"], 3),
                _f(1e3 * r["cpu_ms"] / r["batch"], 2),
            )
    e = args.paper_envs
    scale = Table(
        f"On paper: CPU per env step of the forward passes, N actors x E={e} envs "
        f"(central batch = N x E, at most max_batch={args.max_batch}; local: batch {e} per actor)",
        [
            "net",
            "N",
            "central batch",
            "central us/step",
            "local us/step",
            "saving",
            "uncapped batch",
            "uncapped us/step",
            "uncapped saving",
        ],
    )
    out = []
    for net, rows in result.items():
        local = _interp(rows, e, "cpu_ms") / e * 1e3
        for n in args.paper_actors:
            b = min(n * e, args.max_batch)
            central = _interp(rows, b, "cpu_ms") / b * 1e3
            bu = n * e
            uncapped = _interp(rows, bu, "cpu_ms") / bu * 1e3
            rec = {
                "net": net,
                "actors": n,
                "envs_per_actor": e,
                "central_batch": b,
                "central_cpu_us_per_step": central,
                "local_cpu_us_per_step": local,
                "saving": 1 - central / local,
                "uncapped_batch": bu,
                "uncapped_cpu_us_per_step": uncapped,
                "uncapped_saving": 1 - uncapped / local,
            }
            out.append(rec)
            scale.add(
                net,
                str(n),
                str(b),
                _f(central, 2),
                _f(local, 2),
                f"{100 * rec['saving']:.0f}% ({local / central:.1f}x)",
                str(bu),
                _f(uncapped, 2),
                f"{100 * rec['uncapped_saving']:.0f}% ({local / uncapped:.1f}x)",
            )
    return [fwd, scale], out
