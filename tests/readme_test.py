"""README.md, followed literally: every fenced snippet, in order, in one shell (integration).

A reader on a fresh Debian machine after `make build`: a login shell's PATH
(no pyenv or venv in front), HOME of their own, no PYTHONPATH and no MUSTER_*
variable, in the repository. The whole session runs in a private network
namespace, so the README's default address (127.0.0.1:7878) and ~/.muster
are this test's alone while other suites run. Snippets by kind:

- ```sh: sourced into one bash session (exports and background jobs carry
  on; each block starts in the repository). `make X` lines run as
  `make -n X` (the recipe exists and parses; the real thing would recurse
  into this very test). A block marked `<!-- readme-test: syntax (why) -->`
  is one this machine cannot run as typed (a Slurm cluster): `bash -n`, and
  every musterd flag it uses must be in `musterd --help`.
- ```python: run with python3 from that session's environment, in the
  repository, as a notebook cell would be (their output is checked by their
  own asserts and exit status).
- ```yaml: the Prometheus configuration, by `promtool check config` (the
  README's /home/me is the reader's home).
- unlabelled blocks: what musterd prints; each line must be among the lines
  the session's musterd printed (a line ending in "value..." is a prefix up
  to that example value; /home/me/muster is the repository).

Then: the musterd the README started had no PYTHONPATH in its environment,
yet its workers imported muster (the bundled notebook ran, and `import
muster.torch as hvd` ranks trained: the Horovod snippets and Cloudera's
horovodrun cell). Root only (network namespace; mpirun as root needs
OMPI_ALLOW_RUN_AS_ROOT, which a reader, not being root, does not).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.realpath(os.environ.get("MUSTER_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.path.realpath(os.environ.get("MUSTER_BINARY_DIR") or os.path.join(REPO, "build"))
SKIP = 77  # ctest SKIP_RETURN_CODE
FENCE = re.compile(r"^```(\w*)\s*$")
MARK = re.compile(r"^<!--\s*readme-test:\s*(\w+)\s*\((.+)\)\s*-->\s*$")
LOGIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def snippets(text):
    """[(line, language, mark, body)] of README.md's fenced blocks, in order."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        mark = MARK.match(lines[i - 1]) if i else None
        start = i
        i += 1
        body = []
        while not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        out.append((start + 1, m.group(1), mark.group(1) if mark else None, "\n".join(body) + "\n"))
        i += 1
    return out


def skip(why):
    print("SKIPPED: " + why)
    sys.exit(SKIP)


def driver(work, blocks):
    """The bash script that plays the reader: every runnable block in order, in one shell."""
    lines = ["set -u", "ip link set lo up", "cd %s" % q(REPO), "export HOME=%s" % q(os.path.join(work, "home")),
             "export PATH=%s" % LOGIN_PATH, "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
             "step() { echo; echo \"=== README.md:$1 ($2)\"; }",
             "fail() { echo \"=== README.md:$1 FAILED (exit $2)\"; kill_daemon; exit 1; }",
             "kill_daemon() { [ -f \"$HOME/.muster/musterd.json\" ] && "
             "python3 -c 'import json,os,sys; os.kill(json.load(open(sys.argv[1]))[\"pid\"], 15)' "
             "\"$HOME/.muster/musterd.json\" 2>/dev/null; sleep 1; }"]
    for n, (line, lang, mark, body) in enumerate(blocks):
        path = os.path.join(work, "block%02d.%s" % (n, "py" if lang == "python" else "sh"))
        if lang == "sh" and mark is None:
            body = re.sub(r"(?m)^(\s*)make (\S)", r"\1make -n \2", body)
            with open(path, "w") as f:
                f.write(body)
            lines += ["step %d sh" % line, "cd %s" % q(REPO), "source %s || fail %d $?" % (q(path), line)]
        elif lang == "python":
            with open(path, "w") as f:
                f.write(body)
            lines += ["step %d python" % line, "cd %s" % q(REPO), "python3 %s || fail %d $?" % (q(path), line)]
    lines += ["step end 'musterd environment'",
              "pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[\"pid\"])' "
              "\"$HOME/.muster/musterd.json\")",
              "echo \"musterd PYTHONPATH entries: $(tr '\\0' '\\n' < /proc/$pid/environ | grep -c '^PYTHONPATH=')\"",
              "kill_daemon", "echo '=== README session done'"]
    return "\n".join(lines) + "\n"


def q(s):
    return "'" + s.replace("'", "'\\''") + "'"


def check_static(blocks, printed, home):
    """The blocks the session does not run: syntax, flags, the Prometheus config, the printed lines."""
    problems = []
    help_text = subprocess.run([os.path.join(BUILD, "bin", "musterd"), "--help"], capture_output=True,
                               text=True).stdout
    for line, lang, mark, body in blocks:
        if lang == "sh" and mark is not None:
            assert mark == "syntax", "README.md:%d: unknown readme-test mark %r" % (line, mark)
            r = subprocess.run(["bash", "-n"], input=body, capture_output=True, text=True)
            if r.returncode:
                problems.append("README.md:%d: bash -n: %s" % (line, r.stderr))
            joined = body.replace("\\\n", " ")
            if "musterd" in joined:
                for flag in re.findall(r"(?<=\s)(--[a-z][a-z-]+)", joined):
                    if flag not in help_text:
                        problems.append("README.md:%d: musterd has no flag %s" % (line, flag))
        elif lang == "yaml":
            config = os.path.join(home, "prometheus.yml")
            os.makedirs(os.path.join(home, ".muster"), exist_ok=True)
            with open(config, "w") as f:
                f.write(body.replace("/home/me", home))
            with open(os.path.join(home, ".muster", "token"), "a"):
                pass
            r = subprocess.run(["promtool", "check", "config", config], capture_output=True, text=True)
            if r.returncode:
                problems.append("README.md:%d: promtool: %s%s" % (line, r.stdout, r.stderr))
        elif lang == "":
            for text in body.strip("\n").split("\n"):
                want = text.replace("/home/me/muster", REPO)
                if want.endswith("..."):  # "token=3f9c...": the example's value stands for any
                    stem = re.sub(r"[0-9A-Za-z]*\.\.\.$", "", want)
                    ok = any(p.startswith(stem) for p in printed)
                else:
                    ok = want in printed
                if not ok:
                    problems.append("README.md:%d: musterd did not print %r" % (line, want))
        elif lang not in ("sh", "python"):
            problems.append("README.md:%d: a ```%s block: teach tests/readme_test.py how to check it" % (line, lang))
    return problems


def test_readme_followed_literally():
    if os.geteuid() != 0:
        skip("needs root (a private network namespace for the README's default port and home)")
    if BUILD != os.path.join(REPO, "build"):
        skip("the README's commands name build/; this build is in %s" % BUILD)
    for tool in ("unshare", "ip", "promtool"):
        if not shutil.which(tool):
            skip("%s is not installed (scripts/setup.sh installs it)" % tool)
    with open(os.path.join(REPO, "README.md")) as f:
        blocks = snippets(f.read())
    assert len(blocks) >= 8, blocks
    work = tempfile.mkdtemp(prefix="muster-readme-")
    os.makedirs(os.path.join(work, "home"))
    try:
        script = os.path.join(work, "session.sh")
        with open(script, "w") as f:
            f.write(driver(work, blocks))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MUSTER_", "PYTHON", "OMPI_", "VIRTUAL_ENV"))}
        env["PATH"] = LOGIN_PATH
        r = subprocess.run(["unshare", "--net", "bash", script], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=1500)
        log = r.stdout
        print(log[-20000:])
        assert r.returncode == 0 and "=== README session done" in log, "the README session failed:\n" + log[-8000:]
        # The musterd that the README started had no PYTHONPATH, and its workers imported muster.
        assert "musterd PYTHONPATH entries: 0" in log, log[-3000:]
        assert "waiting to be stopped" in log  # the bundled notebook's workers (they import muster first)
        assert re.search(r"^\[1,0\]<stdout>:final test_accuracy=", log, re.M), "no horovodrun rank trained"
        printed = [line.rstrip("\n") for line in log.split("\n")]
        problems = check_static(blocks, printed, os.path.join(work, "home"))
        assert not problems, "\n".join(problems)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    test_readme_followed_literally()
