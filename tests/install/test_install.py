#!/usr/bin/env python3
"""test_install.py — what `meson install` gives a user of libkvseg.

Installs the build into a staging directory (meson install --destdir, in a
temporary directory: nothing is written outside it but meson's install log
in the build directory) and checks, against oracles of its own:

* the shared library exports exactly the functions the installed headers
  declare (parsed from the headers, preprocessed), all kvs_ and all marked
  KVS_API, and has a versioned soname; each installed header compiles on
  its own, includes only installed headers and the system's, and names no
  benchmark (issue 42: no benchmark hooks in the public API);
* docs/examples/example.c builds with `pkg-config --cflags --libs kvseg`
  against the shared library and runs; and with `pkg-config --static`
  against the static one alone (a tree without the .so), which needs the
  private requirements (-lisal) to be right;
* kvseg and segfs run; the man pages render; the bash completions parse,
  register and complete.

Usage: test_install.py --meson MESON --build BUILD --source SOURCE
       --prefix P --libdir L --includedir I --bindir B --mandir M
       --completions C [--man]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)
    return ok


def run(cmd, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    return subprocess.run(cmd, **kw)


def staged(stage, prefix, d):
    """The staged path of install directory d (relative to prefix or not)."""
    path = d if os.path.isabs(d) else os.path.join(prefix, d)
    return os.path.join(stage, path.lstrip("/"))


def header_functions(include_dir, headers):
    """Functions the headers declare: names kvs_... directly followed by
    a parameter list, in the preprocessed text (comments and macros gone),
    minus static inline ones, which a library does not export. Returns
    (all of them, those marked KVS_API): the preprocessor, not a pattern
    over the source, says which declarations carry the marker, as
    KVS_API expands to visibility("default") (kvseg/status.h)."""
    src = "".join('#include "kvseg/%s"\n' % h for h in headers)
    p = run(["cc", "-E", "-P", "-I", include_dir, "-x", "c", "-"], input=src)
    if not check(p.returncode == 0, "preprocess the installed headers"):
        print(p.stderr)
        return set(), set()
    names, api = set(), set()
    # One declaration per statement; a '(' after the name opens its
    # parameters, while "(*name)" is a function pointer (a type or member).
    for stmt in re.split(r"[;{}]", p.stdout):
        for m in re.finditer(r"\b(kvs_[a-z0-9_]+)\s*\((?!\s*\*)", stmt):
            if not re.match(r"\s*(static|typedef)\b", stmt):
                names.add(m.group(1))
                if re.search(r'visibility\s*\(\s*"default"\s*\)', stmt):
                    api.add(m.group(1))
    return names, api


def private_includes(path, installed):
    """The #include lines of an installed header that name a header not
    installed beside it: a quoted include, or any kvseg/ one, must be
    kvseg/H with H installed; <...> outside kvseg/ is the system's."""
    bad = []
    with open(path) as f:
        for line in f:
            m = re.match(r'\s*#\s*include\s*([<"])([^>"]+)[>"]', line)
            if not m:
                continue
            quoted, name = m.group(1) == '"', m.group(2)
            if quoted or name.startswith("kvseg/"):
                if not (name.startswith("kvseg/") and
                        name[len("kvseg/"):] in installed):
                    bad.append(name)
    return bad


def exported(lib):
    p = run(["nm", "-D", "--defined-only", lib])
    check(p.returncode == 0, "nm -D " + os.path.basename(lib))
    names = set()
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3:
            names.add(parts[2].split("@")[0])
    return names


def main():
    ap = argparse.ArgumentParser()
    for opt in ["meson", "build", "source", "prefix", "libdir",
                "includedir", "bindir", "mandir", "completions"]:
        ap.add_argument("--" + opt, required=True)
    ap.add_argument("--man", action="store_true")
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="kvseg-install-")
    try:
        stage = os.path.join(tmp, "stage")
        p = run([a.meson, "install", "-C", a.build, "--no-rebuild",
                 "--destdir", stage])
        if not check(p.returncode == 0, "meson install --destdir"):
            print(p.stdout, p.stderr)
            return 1
        libdir = staged(stage, a.prefix, a.libdir)
        incdir = staged(stage, a.prefix, a.includedir)

        # ---- the shared library and its exports --------------------------
        sonames = sorted(f for f in os.listdir(libdir)
                         if re.fullmatch(r"libkvseg\.so\.\d+\.\d+\.\d+", f))
        if not check(len(sonames) == 1, "libkvseg.so.X.Y.Z installed"):
            return 1
        lib = os.path.join(libdir, sonames[0])
        d = run(["readelf", "-d", lib]).stdout
        m = re.search(r"Library soname: \[(libkvseg\.so\.\d+)\]", d)
        check(m is not None, "soname with a version: " +
              (m.group(1) if m else d))
        if m:
            check(os.path.realpath(os.path.join(libdir, m.group(1))) ==
                  os.path.realpath(lib), m.group(1) + " -> " + sonames[0])
        check(os.path.realpath(os.path.join(libdir, "libkvseg.so")) ==
              os.path.realpath(lib), "libkvseg.so -> " + sonames[0])
        check(os.path.exists(os.path.join(libdir, "libkvseg.a")),
              "libkvseg.a installed")

        headers = sorted(os.listdir(os.path.join(incdir, "kvseg")))
        print("installed headers:", " ".join(headers))
        declared, api = header_functions(incdir, headers)
        exports = exported(lib)
        check(len(declared) > 0, "%d functions declared" % len(declared))
        check(declared - api == set(), "declared without KVS_API: " +
              " ".join(sorted(declared - api)))
        check(exports == api, "exports = the KVS_API declarations (%d); "
              "only exported: %s; only declared: %s" %
              (len(api), " ".join(sorted(exports - api)) or "-",
               " ".join(sorted(api - exports)) or "-"))
        check(all(n.startswith("kvs_") for n in exports),
              "every export is kvs_: " +
              " ".join(sorted(n for n in exports
                              if not n.startswith("kvs_"))))
        check(exports - declared == set(), "exports not declared: " +
              " ".join(sorted(exports - declared)))
        check(declared - exports == set(), "declared, not exported: " +
              " ".join(sorted(declared - exports)))
        for h in headers:
            with open(os.path.join(incdir, "kvseg", h)) as f:
                text = f.read()
            check(re.search(r"bench", text, re.I) is None,
                  "kvseg/%s names no benchmark" % h)
            bad = private_includes(os.path.join(incdir, "kvseg", h),
                                   headers)
            check(bad == [], "kvseg/%s includes no private header %s" %
                  (h, " ".join(bad)))
            p = run(["cc", "-std=c17", "-Wall", "-Wextra", "-Wpedantic",
                     "-Werror", "-fsyntax-only", "-I", incdir, "-x", "c",
                     "-"], input='#include "kvseg/%s"\n' % h)
            check(p.returncode == 0, "kvseg/%s compiles alone %s" %
                  (h, p.stderr.strip()))

        # ---- the example, shared and static -----------------------------
        example = os.path.join(a.source, "docs", "examples", "example.c")
        env = dict(os.environ)
        env["PKG_CONFIG_PATH"] = os.path.join(libdir, "pkgconfig")
        env["PKG_CONFIG_SYSROOT_DIR"] = stage
        p = run(["pkg-config", "--cflags", "--libs", "kvseg"], env=env)
        check(p.returncode == 0, "pkg-config --cflags --libs kvseg: " +
              p.stdout.strip() + p.stderr.strip())
        flags = p.stdout.split()
        exe = os.path.join(tmp, "example")
        p = run(["cc", "-std=c17", "-Wall", "-Wextra", "-Wpedantic",
                 "-Werror", "-o", exe, example] + flags)
        if check(p.returncode == 0, "cc example.c (shared)"):
            needed = run(["readelf", "-d", exe]).stdout
            check("[libkvseg.so.0]" in needed or
                  re.search(r"\[libkvseg\.so\.\d+\]", needed) is not None,
                  "example needs libkvseg.so.N")
            rundir = os.path.join(tmp, "run-shared")
            os.mkdir(rundir)
            renv = dict(os.environ, LD_LIBRARY_PATH=libdir)
            ldd = run(["ldd", exe], env=renv).stdout
            check(libdir in ldd, "ldd: libkvseg from the staged tree")
            p = run([exe, rundir], env=renv)
            check(p.returncode == 0 and "example: ok" in p.stdout,
                  "example runs (shared): " + p.stdout.strip() +
                  p.stderr.strip())

        # The static library alone: a copy of the tree without the .so.
        sstage = os.path.join(tmp, "static-stage")
        shutil.copytree(stage, sstage, symlinks=True)
        slibdir = staged(sstage, a.prefix, a.libdir)
        for f in os.listdir(slibdir):
            if f.startswith("libkvseg.so"):
                os.unlink(os.path.join(slibdir, f))
        senv = dict(env, PKG_CONFIG_PATH=os.path.join(slibdir, "pkgconfig"),
                    PKG_CONFIG_SYSROOT_DIR=sstage)
        p = run(["pkg-config", "--static", "--cflags", "--libs", "kvseg"],
                env=senv)
        check(p.returncode == 0, "pkg-config --static --cflags --libs "
              "kvseg: " + p.stdout.strip() + p.stderr.strip())
        sexe = os.path.join(tmp, "example-static")
        p = run(["cc", "-std=c17", "-o", sexe, example] + p.stdout.split())
        if check(p.returncode == 0, "cc example.c (static libkvseg) " +
                 p.stderr.strip()):
            needed = run(["readelf", "-d", sexe]).stdout
            check("libkvseg" not in needed, "no libkvseg.so needed")
            rundir = os.path.join(tmp, "run-static")
            os.mkdir(rundir)
            p = run([sexe, rundir])
            check(p.returncode == 0 and "example: ok" in p.stdout,
                  "example runs (static): " + p.stdout.strip() +
                  p.stderr.strip())

        # ---- the programs -------------------------------------------------
        bindir = staged(stage, a.prefix, a.bindir)
        for prog in ["kvseg", "segfs"]:
            p = run([os.path.join(bindir, prog), "--version"])
            check(p.returncode == 0, prog + " --version: " +
                  (p.stdout + p.stderr).strip().replace("\n", " "))

        # ---- man pages ------------------------------------------------------
        if a.man:
            mandir = staged(stage, a.prefix, a.mandir)
            for page, section in [("kvseg", "1"), ("segfs", "8")]:
                path = os.path.join(mandir, "man" + section,
                                    page + "." + section)
                if not check(os.path.exists(path), "man page " + path):
                    continue
                with open(path) as f:
                    text = f.read()
                check(re.search(r'^\.TH "?%s"? "?%s"?' % (page, section),
                                text, re.M) is not None,
                      page + "." + section + ": .TH header")
                if not shutil.which("man"):
                    print("man -l not tried: no man here (tools/setup.sh "
                          "--test installs man-db)")
                else:
                    p = run(["man", "-l", path],
                            env=dict(os.environ, MANPAGER="cat",
                                     PAGER="cat", MANWIDTH="80"))
                    out = p.stdout
                    check(p.returncode == 0 and "NAME" in out and
                          "SYNOPSIS" in out and "EXIT STATUS" in out and
                          page in out,
                          "man -l renders " + page + "." + section + " " +
                          p.stderr.strip())
                    check("warning" not in p.stderr,
                          page + ": no warnings " + p.stderr.strip())
        else:
            print("skip man pages (built without scdoc)")

        # ---- bash completion ----------------------------------------------
        compdir = staged(stage, a.prefix, a.completions)
        for prog, words, want in [("kvseg", "kvseg me", "merge"),
                                  ("kvseg", "kvseg merge --drop",
                                   "--drop-tombstones"),
                                  ("kvseg", "kvseg catalog db sc", "scan"),
                                  ("kvseg", "kvseg catalog db scan --tomb",
                                   "--tombstones"),
                                  ("segfs", "segfs -o skip", "skip_bad")]:
            path = os.path.join(compdir, prog)
            if not check(os.path.exists(path), "completion " + path):
                continue
            check(run(["bash", "-n", path]).returncode == 0,
                  "bash -n " + prog)
            script = ('source "$1"; complete -p %s || exit 1; '
                      'COMP_WORDS=(%s); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); '
                      '_%s; printf "%%s\\n" "${COMPREPLY[@]}"' %
                      (prog, words, prog))
            p = run(["bash", "-c", script, "bash", path])
            check(p.returncode == 0 and want in p.stdout.split(),
                  "complete '%s' gives %s: %s" %
                  (words, want, p.stdout.strip().replace("\n", " ")))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    if failures:
        print("%d checks failed" % len(failures))
        return 1
    print("all install checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
