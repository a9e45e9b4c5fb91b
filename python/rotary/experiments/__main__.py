"""python -m rotary.experiments length-generalization [--quick] [--seed S] [--seeds N] [--out DIR]"""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rotary.experiments")
    commands = parser.add_subparsers(dest="experiment", required=True)
    lg = commands.add_parser("length-generalization",
                             help="tiny transformers per position encoding, evaluated past their training length")
    lg.add_argument("--quick", action="store_true", help="a smoke run in seconds (too short to learn much)")
    lg.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    lg.add_argument("--seeds", type=int, default=None, help="number of seeds (default 3, --quick 1)")
    lg.add_argument("--steps", type=int, default=None, help="training steps per model (default 400)")
    lg.add_argument("--out", default="experiments-out", help="directory for results.json and the plots")
    args = parser.parse_args(argv)

    from .length_generalization import Config, run

    count = args.seeds if args.seeds is not None else (1 if args.quick else 3)
    if count < 1:
        parser.error(f"--seeds must be >= 1 (got {count})")
    seeds = tuple(range(args.seed, args.seed + count))
    config = Config.quick(seeds) if args.quick else Config(seeds=seeds)
    if args.steps is not None:
        if args.steps < 1:
            parser.error(f"--steps must be >= 1 (got {args.steps})")
        config.steps = args.steps
    results = run(config, args.out)
    print(f"{len(results['runs'])} evaluations in {results['seconds']:.0f} s; results in {args.out}/results.json")
    for row in results["summary"]:
        if row["multiplier"] in (1, max(config.multipliers)):
            print(f"  {row['task']:7s} {row['variant']:10s} x{row['multiplier']:<3d} accuracy "
                  f"{row['accuracy_mean']:.3f} ± {row['accuracy_std']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
