"""What the check_*.py scripts share: how they report and how they are called."""
import sys


def report(problems, skipped=()):
    """Prints what was skipped and every problem; the exit status: 0 pass, 1 fail."""
    for line in skipped:
        print(f"SKIPPED {line}")
    for problem in problems:
        print(f"FAIL: {problem}")
    return 1 if problems else 0


def run(main, doc):
    """Calls main with the command line's arguments (as many as main takes, else the usage line
    of doc) and exits with what it returns."""
    wanted = main.__code__.co_argcount
    if len(sys.argv) != wanted + 1:
        sys.exit(doc.rsplit("usage: ", 1)[1])
    sys.exit(main(*sys.argv[1:]))
