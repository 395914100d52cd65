#!/usr/bin/env python3
"""The smoke's variants, paired with the hand launch (issue 42): where its wall time goes.

    .venv/bin/python tests/bench/bench_smoke.py --reps 5 --before HEAD \\
        --variant 'armed={"tf_launch_preimport": ["tensorflow"]}' --out /tmp/me-smoke.json

Each rep runs the hand launch, then this tree, the tree of --before (a checkout, as the
bench's baseline) and every --variant (this tree with extra vars), interleaved as the
bench's smoke part does (bench.part_smoke): each run is paired with its rep's hand launch,
so that the machine's load, printed with every rep, hits all alike. Prints, per variant,
the ratio of the medians and the paired ratio, and the medians of where the time went:
ansible-playbook's start to the first worker's start, the job (first start to last exit;
with the held start the import happens before the go, so before started_at), the first
start to the last worker joined, and the last exit to the verdict. Writes the samples as
JSON to --out. Run it under the integration lock (tests/bench/NOTES.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench  # noqa: E402 - beside this file
from metrics import median  # noqa: E402

SPLIT = ("first_start", "start_to_joined", "job", "exit_to_verdict")


def variant(text: str) -> tuple[str, dict]:
    """LABEL=JSON (extra vars of this tree's runs)."""
    label, _, extra = text.partition("=")
    if not label or not extra:
        raise argparse.ArgumentTypeError(f"--variant {text!r}: LABEL=JSON")
    try:
        return label, dict(json.loads(extra))
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(f"--variant {text!r}: its extra vars are no JSON object ({exc})") from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--before", default="HEAD", help="the tree measured beside this one ('' for none)")
    parser.add_argument("--variant", type=variant, action="append", default=[], help="LABEL=JSON of extra vars")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tf-bench-smoke-") as name:
        tmp = Path(name)
        variants = [bench.Variant("new", bench.REPO)]
        if args.before:
            tree, commit = bench.checkout(args.before, tmp)
            variants.append(bench.Variant(f"before {commit[:10]}", tree))
        variants += [bench.Variant(label, bench.REPO, extra=extra) for label, extra in args.variant]
        data = bench.part_smoke(args.reps, tmp, bench.Instruments(tmp), variants)
    args.out.write_text(json.dumps(data, indent=2, default=str))
    print("hand launch s: " + ", ".join(f"{v:.2f}" for v in data["hand"]) + f" (median {median(data['hand']):.2f})")
    for label, ratio in bench.smoke_ratios(data).items():
        good = bench._ok(data["variants"][label])
        split = ", ".join(f"{key} {bench._med(good, lambda s, k=key: s.get('timings', {}).get(k, float('nan'))):.2f}"
                          for key in SPLIT)
        print(f"{label}: {ratio['ratio']:.2f}x (paired {ratio['paired']:.2f}x), median wall "
              f"{median([s['wall'] for s in good]):.2f} s of {len(good)} good runs; {split}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
