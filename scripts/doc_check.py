#!/usr/bin/env python3
"""Checks that the documentation stays true to the code (Python 3 standard
library only; run by CTest, tests/docs.cmake).

  doc_check.py SRC api                  every AG_API declaration in include/anygrad/
                                        has a comment; what returns a pointer says
                                        who owns it, what can fail says how
  doc_check.py SRC env                  every getenv name in the sources is in the
                                        environment table of docs/design/core.md
  doc_check.py SRC cmake                every AG_* CMake option is in README.md
  doc_check.py SRC reject ANYGRAD LIBDIR
                                        every AG_* variable of that table (but the
                                        free-form ones) set to a value it does not
                                        take makes `anygrad info` name it and the value
  doc_check.py SRC help ANYGRAD         every option of `anygrad <cmd> --help` is in
                                        its section of docs/cli.md, and every option
                                        README.md or docs/ give an `anygrad <cmd>`
                                        (in code) is in its --help
  doc_check.py SRC runnable ANYGRAD LIBDIR WORKDIR
                                        runs the blocks marked runnable (README.md,
                                        "Checked docs"; scripts/doc_run.py) and
                                        compares their output
  doc_check.py SRC python PYTHON LIB WORKDIR
                                        runs the ```python blocks marked runnable with
                                        PYTHON, ANYGRAD_LIB=LIB (libanygrad.so)
  doc_check.py SRC compile CC WORKDIR   compiles the C examples in include/ comments
                                        and the ```c blocks marked compile

Exit status: 0 all checks hold, 1 a check failed (each failure printed), 2
usage error, 77 skipped (a needed tool is missing).
"""
import os
import re
import subprocess
import sys

SKIP = 77


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def doc_files(src):
    out = [os.path.join(src, "README.md")]
    for root, _, names in os.walk(os.path.join(src, "docs")):
        out += [os.path.join(root, n) for n in sorted(names) if n.endswith(".md")]
    return out


def all_docs_text(src):
    return "\n".join(read(p) for p in doc_files(src))


# ---- api: ownership and error comments of the public functions ----

# What a comment must say, by the kind of the return value. A group comment
# (the comment above a run of declarations with no blank line between them)
# covers every declaration of the run.
OWNERSHIP = re.compile(
    r"\b(owned|owns|own reference|borrow\w*|caller|release[sd]?|lives|static|valid until|until|retain\w*|"
    r"new reference|returns? (buf|its argument|the same|the given|out)|the same (pointer|tensor|buffer)|in place|"
    r"never freed|do not free|not freed|free\(\)|ownership as (in|any))", re.I)
ERRORS = re.compile(r"\b(errors?|AG_ERR_\w+|NULL|fails?|failure|cannot fail|status|AG_OK)\b", re.I)


def api_decls(path):
    """(line, declaration, comment) for each AG_API declaration. The comment
    is the declaration's own (or its group's, or a trailing one) plus the
    conventions stated once for many: the header's opening comment and the
    comment that opens the declaration's section (`/* ---- name ----`)."""
    lines = read(path).split("\n")
    decls, comment, i = [], None, 0
    header, section = None, ""
    while i < len(lines):
        s = lines[i].strip()
        if s.startswith("/*"):
            buf = [s]
            while "*/" not in lines[i] and i + 1 < len(lines):
                i += 1
                buf.append(lines[i].strip())
            comment = " ".join(buf)
            if header is None:
                header = comment
            if s.startswith("/* ----"):
                section = comment
        elif s.startswith("AG_API"):
            start = i
            buf = [s]
            while ";" not in lines[i] and i + 1 < len(lines):
                i += 1
                buf.append(lines[i].strip())
            text = " ".join(buf)
            decl, _, trailing = text.partition(";")
            own = comment or ""
            if "/*" in trailing:
                own += " " + trailing
            decls.append((start + 1, decl, own, (header or "") + " " + section))
        elif not s or not s.startswith(("//", "*", "#define", "typedef")):
            comment = None
        i += 1
    return decls


def check_api(src):
    inc = os.path.join(src, "include", "anygrad")
    bad, n = [], 0
    for name in sorted(os.listdir(inc)):
        if not name.endswith(".h"):
            continue
        for line, decl, comment, convention in api_decls(os.path.join(inc, name)):
            n += 1
            m = re.match(r"AG_API\s+(.*?)\b(\w+)\s*\(", decl)
            if not m:
                bad.append(f"include/anygrad/{name}:{line}: cannot parse '{decl[:80]}'")
                continue
            ret, fn = m.group(1).strip(), m.group(2)
            where = f"include/anygrad/{name}:{line}: {fn}"
            if not comment.strip():
                bad.append(f"{where}: no comment")
                continue
            comment += " " + convention
            pointer = "*" in ret
            status = ret.startswith("ag_status")
            if pointer and not OWNERSHIP.search(comment):
                bad.append(f"{where}: returns {ret} but the comment does not say who owns it")
            if (pointer or status) and not ERRORS.search(comment):
                bad.append(f"{where}: the comment does not say what happens on an error")
    return bad, f"{n} AG_API declarations"


# ---- env: every getenv name in one table ----

ENV_CALL = re.compile(r"\b(?:secure_)?getenv\(\"([A-Za-z_][A-Za-z0-9_]*)\"\)|\benv_\w+\(\"([A-Z_][A-Z0-9_]*)\"")
SOURCE_DIRS = ("core", "backends", "kernels", "tools", "models", "include", "examples", "bench")


def env_table(src):
    text = read(os.path.join(src, "docs", "design", "core.md"))
    m = re.search(r"^## Environment variables\n(.*?)(?=^## )", text, re.S | re.M)
    if not m:
        return None
    names = {}
    for row in m.group(1).split("\n"):
        if not row.startswith("| `"):
            continue
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        for v in re.findall(r"`([A-Z_][A-Z0-9_]*)`", cells[0]):
            names[v] = cells
    return names


def check_env(src):
    used = {}
    for top in SOURCE_DIRS:
        for root, _, files in os.walk(os.path.join(src, top)):
            for fn in files:
                if fn.endswith((".c", ".h", ".cu", ".cc", ".cpp", ".inc")):
                    p = os.path.join(root, fn)
                    for m in ENV_CALL.finditer(read(p)):
                        used.setdefault(m.group(1) or m.group(2), os.path.relpath(p, src))
    table = env_table(src)
    if table is None:
        return ["docs/design/core.md has no '## Environment variables' section"], ""
    bad = []
    for name, where in sorted(used.items()):
        cells = table.get(name)
        if not cells:
            bad.append(f"{name} (read in {where}) is not in the environment table of docs/design/core.md")
        elif len(cells) < 4 or not all(cells[:4]):
            bad.append(f"{name}: its row needs accepted values, a default and a meaning")
    return bad, f"{len(used)} variables read by the sources"


# ---- reject: every AG_* variable refuses a value it does not take ----

# Variables whose values are free-form, or that the library and the CLI never
# read; every other AG_* row of the table is probed, so a new variable is
# covered without an edit here.
REJECT_EXEMPT = {
    "AG_BACKEND_PATH": "a list of folders; one that does not exist is skipped, as in PATH",
    "AG_OPENCL_OPTIONS": "compiler options; the OpenCL compiler reports a bad one when a program builds",
    "AG_CACHE_DIR": "a folder; one that cannot be created means no program cache",
    "AG_PYTHON": "read by the benchmarks only",
    "AG_BENCH_GEMM_ONLY": "read by the benchmarks only",
    "AG_CUDA_ARCHS": "a CMake cache variable, not read at run time",
    "AG_HIP_ARCHS": "a CMake cache variable, not read at run time",
}
BOGUS = "zz-bogus"


def check_reject(src, anygrad, libdir):
    from concurrent.futures import ThreadPoolExecutor
    table = env_table(src)
    if table is None:
        return ["docs/design/core.md has no '## Environment variables' section"], ""
    names = sorted(n for n in table if n.startswith("AG_") and n not in REJECT_EXEMPT)
    # A variable its row says a backend module checks ("the cuda backend is
    # unavailable", "the cuda and hip backends ...") is probed only where one
    # of those modules is built.
    absent = []
    for n in list(names):
        m = re.search(r"the (\w+)(?: \(and for `\w+` the (\w+)\))?(?: and (\w+))? backends? (?:is|are) unavailable",
                      " ".join(table[n]))
        mods = [x for x in (m.groups() if m else ()) if x and x != "cpu"]
        if mods and not any(os.path.exists(os.path.join(libdir, f"libanygrad-{x}.so")) for x in mods):
            names.remove(n)
            absent.append(n)
    base = {k: v for k, v in os.environ.items() if not k.startswith("AG_")}
    base["AG_BACKEND_PATH"] = libdir

    def probe(name):
        env = dict(base, **{name: BOGUS})
        try:
            p = subprocess.run([anygrad, "info"], env=env, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return f"{name}={BOGUS}: 'anygrad info' did not finish in 120 s"
        out = p.stdout + p.stderr
        # refused with a message: the variable and the value it refused
        if not any(name in line and BOGUS in line for line in out.splitlines()):
            return f"{name}={BOGUS} is accepted without a message naming it ('anygrad info' printed: {out[-600:]!r})"
        return None

    with ThreadPoolExecutor(max_workers=2) as ex:
        bad = [r for r in ex.map(probe, names) if r]
    for name in REJECT_EXEMPT:
        if name not in table:
            bad.append(f"{name} is exempt in scripts/doc_check.py but not in the environment table")
    return bad, (f"{len(names)} variables refused '{BOGUS}' ({len(REJECT_EXEMPT)} free-form or not read at run time; "
                 f"{len(absent)} of modules not built here{': ' + ', '.join(absent) if absent else ''})")


# ---- cmake: every option documented ----

def check_cmake(src):
    opts = set()
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
        for fn in files:
            if fn == "CMakeLists.txt" or fn.endswith(".cmake"):
                t = read(os.path.join(root, fn))
                opts.update(re.findall(r"\boption\((AG_[A-Z0-9_]+)", t))
                opts.update(re.findall(r"\bset\((AG_[A-Z0-9_]+)\s[^)]*\bCACHE\b", t))
    opts.discard("AG_CONSUMER_MODE")  # tests/consumer's own switch
    docs = all_docs_text(src)
    bad = [f"CMake option {o} is not documented (README.md 'Build options')" for o in sorted(opts)
           if f"`{o}`" not in docs and f"-D{o}=" not in docs]
    return bad, f"{len(opts)} CMake options"


# ---- help: options of each command in the docs, and the reverse ----

COMMANDS = ("info", "check", "bench", "train", "compare", "memory", "report", "export")
OPT = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)")


def help_options(anygrad, cmd):
    p = subprocess.run([anygrad, cmd, "--help"], capture_output=True, text=True, timeout=60)
    return set(OPT.findall(p.stdout + p.stderr)) - {"help"}


def doc_command_options(src):
    """{cmd: {option: where}} for every option written after `anygrad <cmd>`
    (or scripts/main.sh, which runs train) in a code span or block."""
    found = {}
    for path in doc_files(src):
        rel = os.path.relpath(path, src)
        text = read(path)
        spans = re.findall(r"```[^\n]*\n(.*?)```", text, re.S)
        spans += re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
        for span in spans:
            for line in span.split("\n"):
                for m in re.finditer(r"(?:\banygrad|scripts/main\.sh)(?:\s+(%s)\b)?" % "|".join(COMMANDS), line):
                    cmd = m.group(1) or ("train" if "main.sh" in m.group(0) else None)
                    if not cmd:
                        continue
                    rest = line[m.end():]
                    rest = re.split(r"[|;&\"]|\banygrad\b|\bmpirun\b", rest)[0]
                    for o in OPT.findall(rest):
                        found.setdefault(cmd, {}).setdefault(o, rel)
    return found


def cli_sections(src):
    """{cmd: text} of the sections of docs/cli.md, the command-line reference."""
    text = read(os.path.join(src, "docs", "cli.md"))
    parts = re.split(r"^## `anygrad (\w+)`", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def check_help(src, anygrad):
    bad, n = [], 0
    documented = doc_command_options(src)
    sections = cli_sections(src)
    for cmd in COMMANDS:
        opts = help_options(anygrad, cmd)
        n += len(opts)
        sec = sections.get(cmd)
        if sec is None:
            bad.append(f"docs/cli.md has no section '## `anygrad {cmd}`'")
            continue
        for o in sorted(opts):
            if not re.search(r"(?<![\w-])--%s(?![\w-])" % re.escape(o), sec):
                bad.append(f"anygrad {cmd} --{o} is in --help but not in docs/cli.md")
        for o in sorted(set(OPT.findall(sec)) - opts - {"help"}):
            bad.append(f"docs/cli.md: anygrad {cmd} --{o} is not an option of its --help")
        for o, where in sorted(documented.get(cmd, {}).items()):
            if o not in opts and o != "help":
                bad.append(f"{where}: anygrad {cmd} --{o} is not an option of its --help")
    return bad, f"{n} options of {len(COMMANDS)} commands"


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    src, what = argv[1], argv[2]
    if what == "api":
        bad, what_n = check_api(src)
    elif what == "env":
        bad, what_n = check_env(src)
    elif what == "cmake":
        bad, what_n = check_cmake(src)
    elif what == "reject" and len(argv) == 5:
        bad, what_n = check_reject(src, argv[3], argv[4])
    elif what == "help" and len(argv) == 4:
        bad, what_n = check_help(src, argv[3])
    elif what in ("runnable", "compile", "python"):
        import doc_run  # the runnable and compile checks (scripts/doc_run.py)
        return doc_run.main(src, what, argv[3:])
    else:
        print(__doc__)
        return 2
    for b in bad:
        print(b)
    print(f"doc_check {what}: {what_n}, {len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main(sys.argv))
