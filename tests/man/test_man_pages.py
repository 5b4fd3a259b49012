"""The man pages: lint-clean, the sections a reader looks for, and every flag the binary has.

The commands and flags come from the built binary (DDSTAGE_BIN: `ddstage --help`, each
command's and bench subcommand's --help), so a flag added to the CLI without a word in its
page fails here; so does a setting of `ddstage info --settings` missing from ddstage-settings(7).
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAN_DIR = ROOT / "man"
PAGES = sorted(p for p in MAN_DIR.iterdir() if re.fullmatch(r"[\w.-]+\.[1-8]", p.name))
TIMEOUT_S = 60

# The sections each man section needs: a command page answers every question a user asks of
# a command; an API page at least what it is, how it is called and where to look next.
REQUIRED = {
    "1": ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "EXAMPLES", "ENVIRONMENT", "SEE ALSO"],
    "3": ["NAME", "SYNOPSIS", "DESCRIPTION", "SEE ALSO"],
    "5": ["NAME", "DESCRIPTION", "SEE ALSO"],
    "7": ["NAME", "DESCRIPTION", "SEE ALSO"],
}

# Pages outside this repository that SEE ALSO may name (installed by other packages).
EXTERNAL_PAGES = {
    "pread(2)", "mpiexec(1)", "srun(1)", "sbatch(1)", "fi_info(1)", "fi_provider(7)", "fi_cxi(7)",
    "fi_efa(7)", "fi_verbs(7)", "fi_tcp(7)", "fi_shm(7)", "fi_mr(3)", "fi_rma(3)", "fi_pingpong(1)",
    "h5dump(1)", "h5ls(1)", "gnuplot(1)", "pkg-config(1)", "cmake(1)", "python3(1)", "numactl(8)",
    "shm_overview(7)", "environ(7)", "nvidia-smi(1)", "tar(1)", "module(1)",
}


def roff_text(page):
    """The page's source with escapes a reader does not see removed: `\\-` is `-`."""
    text = page.read_text(encoding="utf-8")
    text = text.replace("\\-", "-").replace("\\&", "").replace("\\c", "")
    return re.sub(r"\\f(\[[^\]]*\]|\(..|.)", "", text)


def sections(page):
    """{section title: its text} of one page, in order."""
    result, title = {}, None
    for line in roff_text(page).splitlines():
        m = re.match(r'\.SH\s+"?([^"]*)"?\s*$', line)
        if m:
            title = m.group(1).strip()
            result[title] = ""
        elif title is not None:
            result[title] += line + "\n"
    return result


def mentions(text, flag):
    return re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", text) is not None


def ddstage_bin():
    path = os.environ.get("DDSTAGE_BIN")
    if not path:
        pytest.skip("DDSTAGE_BIN is not set (ctest sets it to the built ddstage)")
    return path


def help_text(*command):
    proc = subprocess.run([ddstage_bin(), *command, "--help"], capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert proc.returncode == 0, f"ddstage {' '.join(command)} --help exited {proc.returncode}: {proc.stderr}"
    return proc.stdout


def help_block(text, heading):
    """The first words of the lines under `heading:` in CLI11's help (up to a blank line)."""
    block = re.search(rf"^{heading}:\n(.*?)(?:\n\n|\Z)", text, re.S | re.M)
    return [line.split()[0] for line in block.group(1).splitlines()
            if re.match(r"  \S", line)] if block else []


def help_flags(text):
    """Every flag name in the help's option column (-o and --output of `-o,--output TEXT`),
    under Options: or any option group's heading."""
    return [name for column in re.findall(r"^  (-\S+)", text, re.M) for name in column.split(",")
            if name.startswith("-") and name not in ("-h", "--help")]


def commands():
    return help_block(help_text(), "Subcommands")


def command_page(command):
    """A command's own page, or ddstage(1) where it documents a small one (help)."""
    page = MAN_DIR / f"ddstage-{command}.1"
    return page if page.exists() else MAN_DIR / "ddstage.1"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_groff_prints_no_warning(page):
    if not shutil.which("groff"):
        pytest.skip("groff is not installed (Debian: groff-base)")
    env = dict(os.environ, LC_ALL="C.UTF-8")
    proc = subprocess.run(["groff", "-man", "-ww", "-z", str(page)], capture_output=True, text=True,
                          env=env, timeout=TIMEOUT_S)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    if shutil.which("man"):  # man-db adds its preprocessors (tbl) and its own checks
        proc = subprocess.run(["man", "-l", "--warnings", str(page)], capture_output=True, text=True,
                              env=dict(env, MANPAGER="cat", PAGER="cat"), timeout=TIMEOUT_S)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_has_its_sections(page):
    name, section = page.name.rsplit(".", 1)
    head = re.search(r"^\.TH\s+(\S+)\s+(\S+)", page.read_text(encoding="utf-8"), re.M)
    assert head and head.group(1).lower() == name.lower() and head.group(2) == section, \
        f"{page.name}: .TH names another page: {head and head.group(0)}"
    found = sections(page)
    missing = [s for s in REQUIRED[section] if s not in found]
    assert not missing, f"{page.name} lacks {missing} (has {list(found)})"
    assert re.match(rf"\s*{re.escape(name)}\b", found["NAME"]), \
        f"{page.name}: NAME does not begin with {name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_see_also_names_pages_that_exist(page):
    refs = re.findall(r"([\w.+-]+)\s?\((\d)\)", sections(page).get("SEE ALSO", ""))
    assert refs, f"{page.name}: SEE ALSO names no page"
    ours = {p.name for p in PAGES}
    unknown = [f"{n}({s})" for n, s in refs if f"{n}.{s}" not in ours and f"{n}({s})" not in EXTERNAL_PAGES]
    assert not unknown, f"{page.name}: SEE ALSO names pages that do not exist: {unknown}"


def test_every_section_is_installed():
    cmake = (ROOT / "CMakeLists.txt").read_text(encoding="utf-8")
    for section in {p.name.rsplit(".", 1)[1] for p in PAGES}:
        assert re.search(rf'install\(DIRECTORY man/ DESTINATION \S*man{section}\s.*"\*\.{section}"', cmake), \
            f"CMakeLists.txt installs no man{section} pages"


def test_global_flags_are_in_ddstage_1():
    text = roff_text(MAN_DIR / "ddstage.1")
    missing = [f for f in help_flags(help_text()) if not mentions(text, f)]
    assert not missing, f"ddstage(1) does not document {missing}"


def test_every_command_has_a_page_listed_in_ddstage_1():
    listed = sections(MAN_DIR / "ddstage.1").get("COMMANDS", "")
    cmds = commands()
    assert "flatten" in cmds and "bench" in cmds, f"no commands parsed from ddstage --help: {cmds}"
    unlisted = [c for c in cmds if not re.search(rf"^\.B\s+{re.escape(c)}\b", listed, re.M)]
    assert not unlisted, f"ddstage(1) COMMANDS lacks {unlisted}"


def test_command_flags_are_in_their_pages():
    problems = []
    for command in commands():
        page = command_page(command)
        text = roff_text(page)
        problems += [f"{page.name} does not document {f} of `ddstage {command}`"
                     for f in help_flags(help_text(command)) if not mentions(text, f)]
    assert not problems, "\n".join(problems)


def test_bench_subcommands_have_sections_and_flags():
    page = MAN_DIR / "ddstage-bench.1"
    text = roff_text(page)
    subsections = re.findall(r"^\.SS\s+(\S+)\s*$", text, re.M)
    overview = sections(MAN_DIR / "ddstage.1").get("COMMANDS", "")
    subs = help_block(help_text("bench"), "Subcommands")
    assert "fabric-raw" in subs, f"no bench subcommands parsed: {subs}"
    problems = []
    for sub in subs:
        if sub not in subsections:
            problems.append(f"{page.name} has no section .SS {sub}")
        if not mentions(overview, sub):
            problems.append(f"ddstage(1) COMMANDS does not list bench {sub}")
        problems += [f"{page.name} does not document {f} of `bench {sub}`"
                     for f in help_flags(help_text("bench", sub)) if not mentions(text, f)]
    assert not problems, "\n".join(problems)


def test_every_setting_is_in_ddstage_settings_7():
    proc = subprocess.run([ddstage_bin(), "info", "--settings"], capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    rows = re.findall(r"^(\S+)\s.*?\b(DDSTAGE_[A-Z0-9_]+)\b", proc.stdout, re.M)
    assert len(rows) > 10, f"no settings parsed from ddstage info --settings:\n{proc.stdout}"
    text = roff_text(MAN_DIR / "ddstage-settings.7")
    missing = [f"{key} ({env})" for key, env in rows if not (mentions(text, key) and mentions(text, env))]
    assert not missing, f"ddstage-settings(7) does not document {missing}"
