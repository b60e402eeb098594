#!/usr/bin/env python3
"""manual_blocks.py - runs the shell blocks of the manual (docs/*.md) and
checks the output it quotes; tests/cli_manual.sh prepares the folder the
pages run in and calls it. The conventions are docs/README.md's:

- a fenced block names its language; `sh` blocks run, `console` blocks run
  their `$ COMMAND` lines and compare what each prints (stdout and stderr
  together) with the lines that follow it; `c`, `cfg`, `cmake`, `json`,
  `markdown`, `python` and `text` blocks are not run; a block without a language,
  or in another one, is an error (where would its output be checked?);
- in a console block's expected lines every number stands for any number,
  `...` inside a line for any text, and a line of `...` alone for any
  lines (none included); everything else must be as printed;
- a command whose comment says `(needs ...)` is not run: what it needs
  (a GPU, other hosts, the whole suite's time) is not on a test machine;
  it is listed as skipped;
- a command is the lines of a block up to one that does not end in `\\`;
  a here-document (`<<'C'` ... `C`) belongs to the command that opens it.

Each page runs in a fresh copy of the prepared folder, its blocks in page
order in one bash (so `export` and the files one block makes carry on to
the next), with the text substitutions of SUBSTITUTIONS below; the first
sh command that fails ends the page (the next ones may need its files).

usage: manual_blocks.py WORK_TEMPLATE BUILD_DIR PAGE.md...
(MANUAL_SHOW=1: also print what each console command printed.)
Prints one line per failure and per skipped command and, last,
"manual_blocks: N passed, M failed" (commands and blocks).
"""
import os
import re
import shutil
import subprocess
import sys

RUN = {"sh", "console"}
NOT_RUN = {"c", "cfg", "cmake", "json", "markdown", "python", "text"}
NEEDS = re.compile(r"#.*\(needs [^)]*\)")
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
SUBSTITUTIONS = [  # (pattern, replacement): docs/README.md lists them
    (r"\bmake install PREFIX=(\S+)", r'cmake --install "$DOCS_BUILD" --prefix \1 >/dev/null'),
    (r"\bcmake --install build\b", r'cmake --install "$DOCS_BUILD"'),
    (r"(?<![\w/.])/opt/", r"$PWD/opt/"),
]


def blocks(path):
    """(language, first line number, lines) of every fenced block of a page."""
    out, lang, start, body = [], None, 0, []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            fence = re.match(r"^```(.*)$", line)
            if lang is None and fence:
                lang, start, body = fence.group(1).strip(), number, []
            elif lang is not None and line == "```":
                out.append((lang, start, body))
                lang = None
            elif lang is not None:
                body.append(line)
    if lang is not None:
        out.append((lang, start, body))
    return out


def commands(lines, first_line):
    """(line number, text) of each command of an sh block (continuations and here-documents joined)."""
    out, i = [], 0
    while i < len(lines):
        start, text = i, [lines[i]]
        heredoc = re.search(r"<<-?\s*'?\"?(\w+)'?\"?", lines[i])
        while text[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            text.append(lines[i])
            heredoc = heredoc or re.search(r"<<-?\s*'?\"?(\w+)'?\"?", lines[i])
        if heredoc:
            while i + 1 < len(lines) and lines[i] != heredoc.group(1):
                i += 1
                text.append(lines[i])
        i += 1
        if "\n".join(text).strip() and not "\n".join(text).lstrip().startswith("#"):
            out.append((first_line + 1 + start, "\n".join(text)))
    return out


def transcript(lines, first_line):
    """(line number, command, expected lines) of each `$ ` command of a console block."""
    out = []
    for i, line in enumerate(lines):
        if line.startswith("$ "):
            out.append([first_line + 1 + i, line[2:], []])
        elif out and out[-1][2] == [] and out[-1][1].endswith("\\"):
            out[-1][1] += "\n" + line
        elif out:
            out[-1][2].append(line)
        elif line.strip():
            out.append([first_line + 1 + i, None, [line]])  # output before any command
    return out


def line_pattern(expected):
    parts = re.split(r"(\.\.\.|" + NUMBER + ")", expected.rstrip())
    out = []
    for k, part in enumerate(parts):
        if k % 2 == 0:
            out.append(re.escape(part))
        else:
            out.append(".*?" if part == "..." else NUMBER)
    return "".join(out)


def matches(expected, actual):
    """Whether the actual output (text) is the expected lines, under the rules at the top."""
    pattern = ""
    for line in expected:
        pattern += r"(?:[^\n]*\n)*?" if line.strip() == "..." else line_pattern(line) + r"[ \t]*\n"
    text = "\n".join(l.rstrip() for l in actual.rstrip("\n").split("\n")) + "\n" if actual.strip() else ""
    return re.fullmatch(pattern, text) is not None


def substitute(text):
    for pattern, replacement in SUBSTITUTIONS:
        text = re.sub(pattern, replacement, text)
    return text


def run_page(path, page, template, build, work, results):
    """Runs the page at `path` (`page`: its name in the messages) in `work`, a copy of `template`."""
    units = []  # (kind, line, command, expected)
    for lang, start, body in blocks(path):
        if lang == "sh":
            units += [("sh", line, text, None) for line, text in commands(body, start)]
        elif lang == "console":
            for line, command, expected in transcript(body, start):
                if command is None:
                    results.fail("%s:%d: output without a `$ ` command before it" % (page, line))
                else:
                    units.append(("console", line, command, expected))
        elif lang not in NOT_RUN:
            what = "without a language" if not lang else "in `%s`" % lang
            results.fail("%s:%d: a block %s: `sh` runs, `console` runs and checks its output; %s are not run "
                         "(docs/README.md)" % (page, start, what, ", ".join(sorted(NOT_RUN))))
    if not units:
        return
    shutil.copytree(template, work, symlinks=True)
    out = os.path.join(work, ".out")
    os.makedirs(out)
    script = ["cd %s" % sh_quote(work)]
    runnable = []
    for n, (kind, line, command, expected) in enumerate(units):
        if NEEDS.search(command):
            print("skipped: %s:%d: %s" % (page, line, NEEDS.search(command).group(0)))
            continue
        runnable.append(n)
        script.append("{ %s\n} >%s/%d.out 2>&1 </dev/null; echo $? >%s/%d.rc" %
                      (substitute(command), out, n, out, n))
        if kind == "sh":  # a failed command ends the page
            script.append("[ \"$(cat %s/%d.rc)\" = 0 ] || exit 0" % (out, n))
    env = dict(os.environ, DOCS_BUILD=build, HOME=os.path.join(work, ".home"),
               PATH=os.path.join(work, ".bin") + os.pathsep + os.environ["PATH"])
    os.makedirs(env["HOME"])
    subprocess.run(["bash", "-c", "\n".join(script)], env=env, check=False)
    for n in runnable:
        kind, line, command, expected = units[n]
        where = "%s:%d: %s" % (page, line, command.split("\n")[0])
        rc_file = os.path.join(out, "%d.rc" % n)
        if not os.path.exists(rc_file):
            results.fail("%s: not run (an earlier command of the page failed)" % where)
            continue
        rc = int(open(rc_file).read())
        actual = open(os.path.join(out, "%d.out" % n), errors="replace").read()
        if kind == "console" and os.environ.get("MANUAL_SHOW"):  # for a page's writer: what it printed
            print("%s printed:\n%s" % (where, actual.rstrip()))
        if actual.startswith("cli_manual: SKIPPED"):  # the wrapper's: a cuda line without the emulator
            print("skipped: %s: %s" % (where, actual.strip()))
        elif kind == "sh" and rc != 0:
            tail = "\n    ".join(actual.rstrip().split("\n")[-5:])
            results.fail("%s: exit status %d:\n    %s" % (where, rc, tail))
        elif kind == "console" and not matches(expected, actual):
            results.fail("%s: the output differs from the page's\n  page:\n    %s\n  printed:\n    %s" %
                         (where, "\n    ".join(expected), "\n    ".join(actual.rstrip().split("\n"))))
        else:
            results.ok()


def sh_quote(text):
    return "'" + text.replace("'", "'\\''") + "'"


class Results:
    def __init__(self):
        self.passed = self.failed = 0

    def ok(self):
        self.passed += 1

    def fail(self, message):
        self.failed += 1
        print("FAILED: " + message, flush=True)


def main(argv):
    template, build, pages = argv[1], argv[2], argv[3:]
    results = Results()
    for k, page in enumerate(pages):
        name = os.path.relpath(page, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
        run_page(page, name, template, build, os.path.join(os.path.dirname(template), "page%d" % k), results)
    print("manual_blocks: %d passed, %d failed" % (results.passed, results.failed))
    return 0 if results.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
