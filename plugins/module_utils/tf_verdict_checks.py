# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verdict's checks: small functions over a parsed run (``tf_verdict_run``).

``judge_run`` judges a run as a whole: the final attempt's workers, and its epochs
together with those earlier attempts completed (issue 23, point 6): each epoch once, from
the latest attempt that printed it; an attempt that begins after epoch E is accepted only
when every worker completed and agreed on epochs 1..E in the attempts before. Each check
returns ``{"name", "ok", "result", "detail"}``; ``ok`` is None for a check the job's
output does not allow (``result``: not checked).
"""

from __future__ import annotations

import math
from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_causes import (
    COORDINATOR_GONE_KIND,
    SERVER_END_KINDS,
    cause_of,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import task_position
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_run import (
    as_dict,
    cluster_list,
    cluster_of,
    is_server_worker,
    task_of,
    typed_cluster,
    marker_inside,
    parse_attempt,
)

DEFAULT_MARKER = "multiworker-complete.txt"
OK = "ok"
FAILED = "failed"
NOT_CHECKED = "not checked"

Worker = dict[str, Any]
Check = dict[str, Any]


def is_zero(value: Any) -> bool:
    """A return code of 0, as an integer: not false, not 0.0, not "0"."""
    return isinstance(value, int) and not isinstance(value, bool) and value == 0


def finite(value: str) -> bool:
    try:
        return math.isfinite(float(value))
    except ValueError:
        return False


def who(worker: Worker | int) -> str:
    if isinstance(worker, int):
        return f"worker {worker}"
    if typed_cluster([worker]):
        kind, number = task_of(worker)
        return f"worker {worker['index']} ({worker['host']}, {kind}:{number})"
    return f"worker {worker['index']} ({worker['host']})"


def check(name: str, problems: list[str], ok_detail: str) -> Check:
    ok = not problems
    return {"name": name, "ok": ok, "result": OK if ok else FAILED, "detail": "; ".join(problems) if problems else ok_detail}


def not_checked(name: str, why: str) -> Check:
    """A check the job's output does not allow: neither ok nor a failure."""
    return {"name": name, "ok": None, "result": NOT_CHECKED, "detail": f"not checked: {why}"}


def skipped(first: int, printed: list[int], shown: int = 10) -> tuple[list[int], int]:
    """The first ``shown`` epochs missing from ``first`` to the last of ``printed`` (sorted),
    and how many are missing; never builds the whole range (an epoch may be 999999999)."""
    examples: list[int] = []
    count = 0
    expected = first
    for epoch in printed:
        if epoch < expected:
            continue
        gap = epoch - expected
        examples += list(range(expected, min(epoch, expected + shown - len(examples))))
        count += gap
        expected = epoch + 1
    return examples, count


def epoch_list(epochs: list[int], count: int | None = None) -> str:
    count = len(epochs) if count is None else count
    return ", ".join(str(e) for e in epochs[:10]) + (f" and {count - min(len(epochs), 10)} more" if count > 10 else "")


def stopped_by_runbook(exit_: dict[str, Any]) -> str | None:
    """Who on the runbook's side ended this worker, or None when the job ended by itself.

    It takes a structured ``stopped_by`` field when the record has one (empty, ``null`` or
    ``job``: the job itself); without it, an older supervisor records ``reason: exited``
    for a job that ended by itself and another reason for every exit the runbook caused.
    """
    if "stopped_by" in exit_:
        by = exit_.get("stopped_by")
        return None if by in (None, "", "job") else str(by)
    reason = exit_.get("reason")
    if reason == "exited":
        return None
    return str(reason) if reason else "the exit record gives no reason"


def finished_by_itself(worker: Worker) -> bool:
    """The job finished its training by itself: it exited 0 and printed ``training_complete``
    before the stop came (exit.json's ``stopped_at`` against the time the supervisor saw
    the line). A stop that reached it afterwards (an operator's stop.yml during its
    shutdown) cut nothing of the run, as the resume's claim agrees ("succeeded: nothing to
    resume"); a job that printed it after a stop's SIGTERM did not finish by itself."""
    exit_ = as_dict(worker.get("exit"))
    stopped_at = exit_.get("stopped_at")
    if not is_zero(exit_.get("returncode")) or not isinstance(stopped_at, (int, float)) or isinstance(stopped_at, bool):
        return False
    done = [entry[0] for entry in exit_.get("timed_lines") or []
            if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], (int, float))
            and str(entry[1]).strip().endswith(" training_complete")]  # fmt: skip
    return bool(done) and min(done) <= stopped_at


def stopped_by_operator(workers: list[Worker]) -> bool:
    """Whether an operator stopped this attempt (stop.yml): a worker's structured
    ``stopped_by`` or its cause says so, for a worker that had not finished by itself."""
    return any(
        (as_dict(w.get("exit")).get("stopped_by") == "operator" or cause_of(w.get("exit")).get("kind") == "operator")
        and not finished_by_itself(w)
        for w in workers
    )


# --- Where each worker of an attempt began ---------------------------------------------


def begin_of(worker: Worker, attempt: int) -> tuple[int, str | None]:
    """The epoch a worker's attempt began at, and why: after the epoch its job names
    (``resumed_from_epoch=E``), else, in a restarted attempt, at its first printed epoch;
    the first attempt begins at 1."""
    resumed = worker["series"].get("resumed")
    if resumed is None:
        resumed = worker["parsed"]["contract"]["resumed"]
    if resumed is not None:
        return resumed + 1, f"resumed_from_epoch={resumed}"
    printed = sorted(worker["series"]["counts"])
    if attempt and printed:
        return printed[0], f"its first epoch is {printed[0]}"
    return 1, None


def agreed_epochs(attempt: dict[str, Any], size: int) -> dict[int, dict[str, str]]:
    """The epochs every worker 0..size-1 of an attempt completed with identical metrics.
    An attempt whose host was lost for good (a spare took its place, or the cluster
    shrank: ``lost_for_good``, ``size`` from its decision's record) is judged by the
    workers whose files could be collected."""
    workers = attempt["workers"]
    size = int(attempt.get("size") or size)
    lost = set(attempt.get("lost_for_good") or [])
    present = sorted(w["index"] for w in workers)
    if present != [i for i in range(size) if i not in lost or i in present] or not size or not workers:
        return {}
    found = {}
    for epoch in sorted({e for w in workers for e in w["series"]["epochs"]}):
        seen = [w["series"]["epochs"].get(epoch) for w in workers]
        if all(seen) and all(m == seen[0] for m in seen):
            found[epoch] = seen[0]
    return found


def completed_before(attempts: list[dict[str, Any]], size: int) -> list[dict[int, tuple[int, dict[str, str]]]]:
    """For each attempt, the epochs the attempts before it completed and agreed on:
    {epoch: (the latest such attempt, its metrics)}."""
    done: dict[int, tuple[int, dict[str, str]]] = {}
    before = []
    for attempt in attempts:
        before.append(dict(done))
        for epoch, metrics in agreed_epochs(attempt, size).items():
            done[epoch] = (attempt["attempt"], metrics)
    return before


# --- The checks ---------------------------------------------------------------------------


def check_logs_collected(workers: list[Worker], size: int) -> Check:
    present = {w["index"] for w in workers}
    problems = [f"{who(i)}: no files were collected" for i in range(size) if i not in present]
    problems += [f"{who(w)}: no log" for w in workers if w.get("log") is None]
    if not workers and not problems:
        problems.append("no worker's files were collected")
    return check("logs_collected", problems, f"{size} of {size} workers")


def check_exit_status(workers: list[Worker]) -> Check:
    problems = []
    for w in workers:
        exit_ = w.get("exit")
        if not isinstance(exit_, dict):
            problems.append(f"{who(w)}: no exit status (still running or lost)")
        elif not is_zero(exit_.get("returncode")):
            problems.append(f"{who(w)}: exit status {exit_.get('returncode')} ({exit_.get('reason')})")
        else:
            by = stopped_by_runbook(exit_)
            # A ParameterServerStrategy server's end is the runbook's stop at the run's end.
            stopped_at_end = is_server_worker(w) and cause_of(exit_).get("kind") in SERVER_END_KINDS
            if by and not finished_by_itself(w) and not stopped_at_end:
                problems.append(f"{who(w)}: exited 0, but the runbook ended it ({by}); the job did not finish by itself")
    return check("exit_status", problems, "every worker exited 0 (the servers stopped once the coordinator ended)"
                 if any(is_server_worker(w) for w in workers) else "every worker exited 0 by itself")


def runbook_index_of(worker: Worker, typed: bool) -> Any:
    """The runbook's index the worker's TF_CONFIG gives it: its task's index, or in a
    cluster of several task types its task's place (tf_run.task_position)."""
    config = as_dict(worker.get("config"))
    if not typed:
        return as_dict(config.get("task")).get("index")
    try:
        return task_position(config)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def check_worker_index(workers: list[Worker], contract: bool) -> Check:
    problems = []
    typed = typed_cluster(workers)
    for w in workers:
        index = runbook_index_of(w, typed)
        if index != w["index"]:
            kind, number = task_of(w)
            given = f"task {kind}:{number}" if typed else f"task.index is {index}"
            problems.append(f"{who(w)}: TF_CONFIG {given}")
        printed = w["parsed"]["contract"]["indices"]
        if printed and printed != {w["index"]}:
            problems.append(f"{who(w)}: log reports worker={sorted(printed)}")
    ok = "each worker ran as its own index"
    return check(
        "worker_index", problems, ok if contract else "each worker was given its own index (TF_CONFIG); the job's log does not print it"
    )


def directories(workers: list[Worker]) -> dict[int, list[Worker]]:
    dirs: dict[int, list[Worker]] = {}
    for w in workers:
        dirs.setdefault(w["index"], []).append(w)
    return dirs


def check_worker_set(workers: list[Worker], size: int) -> Check:
    problems = []
    for index, same in sorted(directories(workers).items()):
        if len(same) > 1:
            hosts = ", ".join(w["host"] for w in same)
            problems.append(f"{who(index)}: {len(same)} directories (on {hosts}); one index, one directory")
    for w in workers:
        if w["index"] >= size:
            problems.append(f"{who(w)}: index {w['index']} is outside the cluster of {size} (0..{size - 1})")
    return check("worker_set", problems, f"one directory for each index 0..{size - 1}, no other")


def check_same_cluster(workers: list[Worker]) -> Check:
    reference = cluster_of(workers)
    problems = []
    typed = typed_cluster(workers)
    for w in workers:
        cluster = cluster_list(w) if typed else as_dict(as_dict(w.get("config")).get("cluster")).get("worker")
        if cluster != reference:
            problems.append(f"{who(w)}: cluster list {cluster} differs from {reference}")
    return check("same_cluster", problems, "every worker was given the same cluster list")


def check_cluster_seen(
    workers: list[Worker], size: int, contract: bool, keys: tuple[str, ...] = ("cluster_workers", "replicas"), who_saw: str = "every worker"
) -> Check:
    if not contract:
        return not_checked("cluster_seen", "the job prints no worker=I cluster_workers=N replicas=R line")
    problems = []
    for w in workers:
        header = w["parsed"]["contract"]["header"]
        for key in keys:
            value = header.get(key)
            if value is None:
                problems.append(f"{who(w)}: printed no {key}")
            elif value != str(size):
                problems.append(f"{who(w)}: {key}={value}, cluster has {size}")
    return check("cluster_seen", problems, f"{who_saw} saw {size} workers")


def check_metrics_agree(workers: list[Worker], label: str, keras: bool, up_to: int | None) -> tuple[Check, dict[int, dict[str, str]]]:
    """Every epoch's metrics identical on every worker (up to ``up_to``, the last epoch
    every worker completed, for a run an operator stopped); returns the check and the
    metrics every worker agrees on, per epoch."""
    problems = []
    epochs: dict[int, dict[str, str]] = {}
    all_epochs = sorted({e for w in workers for e in list(w["series"]["epochs"]) + list(w["series"]["counts"])})
    if up_to is not None:
        all_epochs = [e for e in all_epochs if e <= up_to]
    for epoch in all_epochs:
        printed = []
        for w in workers:
            metrics = w["series"]["epochs"].get(epoch)
            if metrics is None:
                problems.append(f"epoch {epoch}: {who(w)} printed no metrics")
            elif not metrics:
                problems.append(f"epoch {epoch}: {who(w)} printed an epoch line without any metric")
            else:
                printed.append((w, metrics))
        names = sorted({name for _worker, metrics in printed for name in metrics})
        for w, metrics in printed:
            lacking = [name for name in names if name not in metrics]
            if lacking:
                problems.append(f"epoch {epoch}: {who(w)} printed no {', '.join(lacking)}")
        agreed = {}
        for key in names:
            seen: dict[str, list[int]] = {}
            for w, metrics in printed:
                if key in metrics:
                    seen.setdefault(metrics[key], []).append(w["index"])
            if len(seen) > 1:
                spread = ", ".join(f"{value} from worker(s) {idx}" for value, idx in sorted(seen.items()))
                problems.append(f"epoch {epoch} {key}: {spread}")
            elif sum(len(idx) for idx in seen.values()) == len(workers):
                agreed[key] = next(iter(seen))
        epochs[epoch] = agreed
    detail = f"{len(all_epochs)} epoch(s), identical on every worker" + (f" ({label})" if keras else "")
    return check("metrics_agree", problems, detail), epochs


def check_metrics_finite(workers: list[Worker]) -> Check:
    bad: dict[tuple[int, str, str], list[int]] = {}
    for w in workers:
        for epoch, metrics in w["series"]["epochs"].items():
            for name, value in (metrics or {}).items():
                if not finite(value):
                    bad.setdefault((epoch, name, value), []).append(w["index"])
    problems = [
        f"epoch {epoch} {name}={value} from worker(s) {idx}: not a finite number" for (epoch, name, value), idx in sorted(bad.items())
    ]
    return check("metrics_finite", problems, "every metric of every epoch is a finite number")


def resume_gaps(worker: Worker, attempt: int, done: dict[int, Any]) -> tuple[list[str], list[int]]:
    """An attempt that begins after epoch E is trusted only when earlier attempts had
    every worker complete and agree on epochs 1..E (issue 24, point 5). Returns the
    problems, and in a restarted attempt the first epochs (up to 10) of 1..E that no
    earlier attempt agreed on."""
    first, how = begin_of(worker, attempt)
    if first <= 1:
        return [], []
    examples, count = skipped(1, sorted(e for e in done if e < first) + [first])
    if not count:
        return [], []
    if attempt == 0:
        return [f"{who(worker)}: {how} in the first attempt: no earlier attempt completed epochs 1..{first - 1}, "
                "and a resume is trusted only after one"], []  # fmt: skip
    return [
        f"{who(worker)}: attempt {attempt} begins after epoch {first - 1} ({how}), but no earlier attempt had every "
        f"worker complete and agree on epoch {epoch_list(examples, count)}"
    ], examples


def printed_by_some(earlier: list[dict[str, Any]], epochs: list[int]) -> list[str]:
    """Why an epoch that an attempt resumed after is no agreed epoch, where the latest
    earlier attempt that printed it shows it: some of its workers printed the epoch and
    others did not (a worker killed between the epoch's last collective and its line), yet
    a backup of it was made, since the next attempt restored it."""
    notes = []
    for epoch in epochs:
        for attempt in reversed(earlier):
            printers = [w for w in attempt["workers"] if w["series"]["epochs"].get(epoch)]
            if not printers:
                continue
            silent = [w for w in attempt["workers"] if not w["series"]["epochs"].get(epoch)]
            if silent:
                notes.append(f"attempt {attempt['attempt']} backed up epoch {epoch}, which {', '.join(who(w) for w in silent)} "
                             f"never printed ({', '.join(who(w) for w in printers)} did)")  # fmt: skip
            break
    if not notes:
        return []
    return ["; ".join(notes) + ": a job must back an epoch up only after every worker printed it (docs/your-project.md)"]


def check_epochs_once(attempt: dict[str, Any], done: dict[int, Any], earlier: list[dict[str, Any]]) -> tuple[Check, int | None]:
    """Each epoch once, none skipped, none missing before the attempt began; returns the
    check and the last epoch printed. ``earlier`` (the attempts before) explains a resume
    after an epoch some of their workers printed and others did not."""
    problems = []
    lasts = []
    gaps: set[int] = set()
    for w in attempt["workers"]:
        series = w["series"]
        problems += [f"{who(w)}: {error}" for error in series["errors"]]
        printed = sorted(series["counts"])
        problems += [f"{who(w)}: epoch {e} printed {series['counts'][e]} times" for e in printed if series["counts"][e] > 1]
        gap_problems, unagreed = resume_gaps(w, attempt["attempt"], done)
        problems += gap_problems
        gaps.update(unagreed)
        if not printed:
            continue
        first, _how = begin_of(w, attempt["attempt"])
        outside = [e for e in printed if e < first]
        if outside:
            problems.append(f"{who(w)}: printed epoch {epoch_list(outside)} before its first, {first}")
        examples, count = skipped(first, printed)
        if count:
            problems.append(f"{who(w)}: printed no epoch {epoch_list(examples, count)} (epochs {first}..{printed[-1]})")
        lasts.append(printed[-1])
    problems += printed_by_some(earlier, sorted(gaps))
    span = f" up to {max(lasts)}" if lasts else ""
    return check("epochs_once", problems, f"every worker printed each epoch once, none skipped{span}"), max(lasts, default=None)


def check_restore_agree(attempts: list[dict[str, Any]]) -> Check:
    """Every worker of one attempt began at the same epoch: a worker that restored another
    checkpoint than the others (or none) fails with cause restore-mismatch."""
    problems = []
    for attempt in attempts:
        begins = [(w, *begin_of(w, attempt["attempt"])) for w in attempt["workers"] if w["series"]["counts"]]
        if len({first for _w, first, _how in begins}) > 1:
            shown = ", ".join(f"{who(w)} at epoch {first}" + (f" ({how})" if how else "") for w, first, how in begins)
            problems.append(f"attempt {attempt['attempt']}: the workers began at different epochs: {shown}")
    return check("restore_agree", problems, "every worker of each attempt began at the same epoch")


def last_common_epoch(workers: list[Worker]) -> int:
    """The last epoch every worker printed metrics for (0: none)."""
    common = None
    for w in workers:
        done = {e for e, m in w["series"]["epochs"].items() if m}
        common = done if common is None else common & done
    return max(common or [0])


def check_epochs_complete(workers: list[Worker], stopped: dict[str, Any] | None, attempt: int = 0) -> Check:
    totals: dict[int, list[int]] = {}
    for w in workers:
        for total in w["series"]["totals"]:
            totals.setdefault(total, []).append(w["index"])
    if stopped:
        of = f" of {stopped['of']}" if stopped.get("of") else ""
        return check("epochs_complete", [f"stopped by the {stopped['by']} at epoch {stopped['epoch']}{of}"], "")
    if not totals:
        return not_checked(
            "epochs_complete",
            "the job announces no epoch total (epochs=N in its worker= header, epoch=E/N, or Keras' Epoch E/N), "
            "so a run cut short after an epoch looks like a finished one",
        )
    problems = []
    if len(totals) > 1:
        spread = ", ".join(f"{total} from worker(s) {idx}" for total, idx in sorted(totals.items()))
        problems.append(f"workers announce different epoch totals: {spread}")
    total = max(totals)
    for w in workers:
        # A worker that resumed after the last epoch (it was stopped between its last
        # epoch and its exit) has nothing left to print: its last epoch is the resumed one.
        last = max(w["series"]["counts"], default=begin_of(w, attempt)[0] - 1)
        if last < total:
            problems.append(f"{who(w)}: last epoch printed is {last} of {total}")
        elif last > total:
            problems.append(f"{who(w)}: printed epoch {last}, beyond the total of {total}")
    return check("epochs_complete", problems, f"every worker printed epoch {total} of {total}")


def check_training_complete(workers: list[Worker], contract: bool) -> Check:
    if not contract:
        return not_checked("training_complete", "the job prints no worker=I training_complete line")
    problems = [f"{who(w)}: no training_complete line" for w in workers if not w["parsed"]["contract"]["complete"]]
    return check("training_complete", problems, "every worker printed training_complete")


def check_chief_marker(workers: list[Worker], marker_name: str, contract: bool) -> Check:
    if not contract and marker_name == DEFAULT_MARKER and not any(w.get("marker") for w in workers):
        return not_checked(
            "chief_marker",
            f"no worker wrote {marker_name}, the default job's marker; set tf_verdict_marker to a "
            "path only the chief writes (model/model.keras)",
        )
    chief = next((w for w in workers if w["index"] == 0), None)
    problems = []
    if not marker_inside(marker_name):
        problems.append(f"tf_verdict_marker {marker_name!r} is not a relative path inside the worker directory")
    elif chief is None or not any(w.get("marker") for w in directories(workers).get(0, [])):
        problems.append(f"the chief, {who(chief or 0)}, wrote no {marker_name}")
    for w in workers:
        if w["index"] != 0 and w.get("marker"):
            problems.append(f"{who(w)} is not the chief but wrote {marker_name}")
    return check("chief_marker", problems, f"only the chief wrote {marker_name}")


def check_servers_joined(servers: list[Worker]) -> Check:
    """ParameterServerStrategy: every server (ps and worker task, the runbook's
    tf_ps_server.py) joined the cluster and ended at the run's end: stopped by the runbook
    once the coordinator ended (cause ``stopped``), or by itself where no runbook was left
    to stop it (``coordinator-gone``), by its exit record's cause, never its log."""
    problems = []
    at_end = gone = 0
    for w in servers:
        exit_ = w.get("exit")
        if not isinstance(exit_, dict):
            continue  # exit_status names it
        kind = cause_of(exit_).get("kind")
        stopped_at_end = is_zero(exit_.get("returncode")) and kind in SERVER_END_KINDS
        at_end += stopped_at_end
        gone += stopped_at_end and kind == COORDINATOR_GONE_KIND
        if exit_.get("joined") is not True:
            problems.append(f"{who(w)}: its server never joined the cluster")
        elif is_zero(exit_.get("returncode")) and not stopped_at_end:
            problems.append(f"{who(w)}: exited 0 without the coordinator having ended")
    by_itself = f" ({gone} by itself, no runbook left to stop it)" if gone else ""
    ended = (f", each stopped once the chief (coordinator) ended{by_itself}" if at_end == len(servers)
             else f"; {at_end} stopped once the chief (coordinator) ended, the others did not (exit_status)")  # fmt: skip
    return check("servers_joined", problems, f"{len(servers)} server(s) joined{ended}")


NO_EPOCHS = "the job prints no epoch lines (worker=I epoch=E name=value, or Keras model.fit verbose=2)"


def judge_run(attempts: list[dict[str, Any]], size: int, marker_name: str) -> dict[str, Any]:
    """Every check over a parsed run (``tf_verdict_run.parse_attempt`` per attempt, in
    order): the final attempt's workers, and the run's epochs across its attempts.

    Returns ``checks``, ``metrics`` ({"<epoch>": the metrics every worker agrees on}, each
    epoch from the attempt it comes from), ``epoch_sources`` ({"<epoch>": attempt}),
    ``job_output`` and ``stopped`` (None, or where an operator stopped the run).
    """
    everyone = attempts[-1]["workers"]
    # ParameterServerStrategy: only the chief (the coordinator) trains and prints metrics;
    # the servers are judged on their own (servers_joined). The metrics checks read the
    # attempts without them.
    servers = [w for w in everyone if is_server_worker(w)]
    seen_keys: tuple[str, ...] = ("cluster_workers", "replicas")
    seen_size = size
    if servers:
        attempts = [{**a, "workers": [w for w in a["workers"] if not is_server_worker(w)]} for a in attempts]
        seen_keys = ("cluster_workers",)
        seen_size = sum(1 for w in servers if task_of(w)[0] == "worker")
    final = attempts[-1]
    workers = final["workers"]
    contract = final["contract"]
    before = completed_before(attempts, len(workers) if servers else size)
    done = before[-1]
    stopped = None
    if stopped_by_operator(workers):
        totals = {t for w in workers for t in w["series"]["totals"]}
        stopped = {"by": "operator", "epoch": last_common_epoch(workers), "of": max(totals) if totals else None}

    checks = [
        check_logs_collected(everyone, size),
        check_exit_status(everyone),
        check_worker_index(everyone, contract),
        check_worker_set(everyone, size),
        check_same_cluster(everyone),
        check_cluster_seen(workers, seen_size, contract, seen_keys, "the chief (coordinator)" if servers else "every worker"),
    ]
    if servers:
        checks.append(check_servers_joined(servers))
    epochs: dict[int, dict[str, str]] = {}
    sources: dict[int, int] = {}
    if final["source"] is None and done and final["attempt"]:
        # The final attempt only restored and finished (its workers resumed after the last
        # epoch): the run's epochs are those the attempts before it completed and agreed on.
        once, _last = check_epochs_once(final, done, attempts[:-1])
        for epoch, (number, metrics) in done.items():
            epochs[epoch], sources[epoch] = metrics, number
        agree = check("metrics_agree", [], f"{len(epochs)} epoch(s), identical on every worker: all agreed in earlier attempt(s)")
        # Their epoch total is the contract header's (epochs=N): no epoch line printed one.
        headed = [{**w, "series": w["parsed"]["series"].get("contract") or w["series"]} for w in workers]
        checks += [agree, check_metrics_finite(workers), once, check_restore_agree(attempts),
                   check_epochs_complete(headed, stopped, final["attempt"])]  # fmt: skip
    elif final["source"] is None:
        if contract:
            checks.append(check("metrics_agree", ["no worker printed any epoch metrics"], ""))
        else:
            checks.append(not_checked("metrics_agree", NO_EPOCHS))
        checks += [not_checked(name, NO_EPOCHS) for name in ("metrics_finite", "epochs_once", "restore_agree")]
        checks.append(check_epochs_complete(workers, stopped) if stopped else not_checked("epochs_complete", NO_EPOCHS))
    else:
        agree, epochs = check_metrics_agree(workers, final["label"], final["source"] != "contract", stopped and stopped["epoch"])
        once, _last = check_epochs_once(final, done, attempts[:-1])
        begun = min((begin_of(w, final["attempt"])[0] for w in workers if w["series"]["counts"]), default=1)
        sources = {e: final["attempt"] for e in epochs}
        for epoch, (number, metrics) in done.items():
            if epoch < begun:
                epochs[epoch], sources[epoch] = metrics, number
        earlier = sum(1 for attempt in sources.values() if attempt != final["attempt"])
        if agree["ok"] and earlier:
            # The run is judged whole: the epochs an earlier attempt completed count too.
            agree["detail"] = (
                f"{len(epochs)} epoch(s), identical on every worker: {earlier} agreed in earlier attempt(s), "
                f"{len(epochs) - earlier} in attempt {final['attempt']}" + (f" ({final['label']})" if final["source"] != "contract" else "")
            )
        checks += [agree, check_metrics_finite(workers), once, check_restore_agree(attempts),
                   check_epochs_complete(workers, stopped, final["attempt"])]  # fmt: skip
    checks.append(check_training_complete(workers, contract))
    checks.append(check_chief_marker(everyone, marker_name, contract))
    return {
        "checks": checks,
        "metrics": {str(e): m for e, m in sorted(epochs.items())},
        "epoch_sources": {str(e): a for e, a in sorted(sources.items())},
        "job_output": {"contract_lines": contract, "metrics_from": final["source"]},
        "stopped": stopped,
    }


def judge(workers: list[Worker], size: int, marker_name: str, attempt: int = 0) -> dict[str, Any]:
    """Every check over the workers of one attempt, alone (no earlier attempt)."""
    return judge_run([parse_attempt(workers, attempt)], size, marker_name)


CHECK_NAMES: tuple[str, ...] = (
    "logs_collected", "exit_status", "worker_index", "worker_set", "same_cluster", "cluster_seen", "metrics_agree",
    "metrics_finite", "epochs_once", "restore_agree", "epochs_complete", "training_complete", "chief_marker",
    "servers_joined",
)  # fmt: skip
