"""``python -m studies NAME [override ...] [--dry-run]``; without NAME, the list of studies."""

from __future__ import annotations

import argparse

from .run import StudyError, describe, run_study, study_names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m studies", description=__doc__)
    p.add_argument("name", nargs="?", help="the study (a config under studies/conf/)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of the study's settings")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = p.parse_args(argv)
    if args.name is None:
        for name in study_names():
            print(f"  {name:34s} {describe(name)}")
        return 0
    try:
        run_study(args.name, args.overrides, dry_run=args.dry_run)
    except StudyError as e:
        p.error(str(e))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
