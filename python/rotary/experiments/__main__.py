"""python -m rotary.experiments length-generalization [--quick] [--seed S] [--seeds N] [--out DIR] ...
python -m rotary.experiments plot results.json [--out DIR]
python -m rotary.experiments long-context [--quick] [--out DIR]"""
from __future__ import annotations

import argparse
import shlex
import sys


def _names(text: str) -> tuple:
    return tuple(part for part in text.split(",") if part)


def _lengths(text: str) -> tuple:
    try:
        return tuple(int(part) for part in text.split(",") if part)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated token counts, e.g. 64,128 (got {text!r})")


def _factor(text: str):
    if text == "auto":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a number (got {text!r})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rotary.experiments")
    commands = parser.add_subparsers(dest="experiment", required=True)
    lg = commands.add_parser(
        "length-generalization",
        help="tiny transformers per position encoding, evaluated past their training length",
        description="Trains a tiny causal transformer per (task, encoding, seed) at one length and evaluates it "
                    "at multiples of that length; RoPE also with each test-time scaling scheme. "
                    "docs/experiments.md describes it and its results.")
    lg.add_argument("--quick", action="store_true",
                    help="the run of make test: length 16, 120 steps, 1 seed, eval to 4x (under a minute)")
    lg.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    lg.add_argument("--seeds", type=int, default=None, help="number of seeds from --seed on (default 3, --quick 1)")
    lg.add_argument("--steps", type=int, default=None, help="training steps per model (default 400, --quick 120)")
    lg.add_argument("--train-len", type=int, default=None, help="training length in tokens (default 64, --quick 16)")
    lg.add_argument("--eval-lengths", type=_lengths, default=None,
                    help="comma-separated eval lengths in tokens, each >= the training length "
                         "(default: 1, 2, 4, 8, 16 x the training length)")
    lg.add_argument("--encodings", type=_names, default=None, help="comma-separated: none,sinusoidal,learned,alibi,rope")
    lg.add_argument("--tasks", type=_names, default=None, help="comma-separated: recall,copy,local")
    lg.add_argument("--scalings", type=_names, default=None,
                    help="RoPE's test-time schemes, comma-separated: rope,linear,ntk,dynamic,yarn")
    lg.add_argument("--factor", type=_factor, default=None,
                    help="the factor of linear, ntk and yarn: 'auto' (default: eval length / training length) "
                         "or a fixed number >= 1")
    lg.add_argument("--threads", type=int, default=None, help="torch intra-op threads per model (default 1)")
    lg.add_argument("--jobs", type=int, default=None,
                    help="worker processes training models side by side (default 1); results do not depend on it")
    lg.add_argument("--out", default="experiments-out", help="directory for results.json, the plots and report.html")
    plot = commands.add_parser("plot", help="the plots and report.html again from a results.json",
                               description="Writes the SVG plots and report.html of a length-generalization "
                                           "results.json (by default beside it).")
    plot.add_argument("results", help="a results.json written by length-generalization")
    plot.add_argument("--out", default=None, help="directory for the plots (default: the results' directory)")
    lc = commands.add_parser(
        "long-context", help="SmolLM2-135M past its trained context (8192) with each RoPE scaling, no fine-tuning",
        description="Perplexity by position bucket over 16384 tokens of real text and passkey retrieval at 8k, "
                    "12k and 16k tokens, for plain RoPE, linear, NTK-aware, dynamic NTK and YaRN (factor 2). "
                    "docs/experiments.md describes it and its results.")
    lc.add_argument("--quick", action="store_true",
                    help="the test's run: 512 tokens, one passkey cell of 256 (about a minute)")
    lc.add_argument("--out", default="long-context-out", help="directory for results.json, results.md and the plot")
    args = parser.parse_args(argv)

    from rotary import RotaryError

    if args.experiment == "long-context":
        from . import long_context

        config = long_context.Config.quick() if args.quick else long_context.Config()
        command = "python -m rotary.experiments " + " ".join(
            shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
        results = long_context.run(config, args.out, command=command)
        print(f"{results['seconds']['total']:.0f} s; results in {args.out}/results.json, results.md, "
              "perplexity_by_position.svg")
        return 0

    if args.experiment == "plot":
        import json
        import os

        from .length_generalization import write_plots

        try:
            with open(args.results, encoding="utf-8") as source:
                results = json.load(source)
        except (OSError, ValueError) as error:
            parser.error(f"cannot read {args.results}: {error}")
        if results.get("experiment") != "length-generalization":
            parser.error(f"{args.results} is not a length-generalization results.json")
        out = args.out or os.path.dirname(os.path.abspath(args.results))
        write_plots(results, out)
        print(f"plots and report.html in {out}")
        return 0

    from .length_generalization import Config, run

    count = args.seeds if args.seeds is not None else (1 if args.quick else 3)
    if count < 1:
        parser.error(f"--seeds must be >= 1 (got {count})")
    overrides = {"seeds": tuple(range(args.seed, args.seed + count))}
    for option, key in (("steps", "steps"), ("train_len", "train_len"), ("eval_lengths", "eval_lengths"),
                        ("encodings", "encodings"), ("tasks", "tasks"), ("scalings", "scalings"),
                        ("factor", "scaling_factor"), ("threads", "threads"), ("jobs", "jobs")):
        if getattr(args, option) is not None:
            overrides[key] = getattr(args, option)
    try:
        config = Config.quick(**overrides) if args.quick else Config(**overrides)
    except RotaryError as error:
        parser.error(str(error))
    command = "python -m rotary.experiments " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    results = run(config, args.out, command=command)
    print(f"{len(results['runs'])} evaluations in {results['seconds']:.0f} s; results in {args.out}/results.json, "
          f"page {args.out}/report.html")
    for row in results["summary"]:
        if row["length"] in (config.train_len, max(config.eval_lengths)):
            print(f"  {row['task']:7s} {row['variant']:10s} {row['length']:5d} tokens  accuracy "
                  f"{row['accuracy_mean']:.3f} ± {row['accuracy_std']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
