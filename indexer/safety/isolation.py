"""Python processes repoctx starts run none of the indexed tree's code.

multiprocessing's spawn starts a child as ``python -c "from multiprocessing.spawn import …"`` in
the parent's working directory; so does its resource tracker. ``-c`` puts ``''`` (the working
directory) first on ``sys.path``: run in a repository, a `multiprocessing/`, `pickle.py` or
`indexer/` there replaced Python's (or repoctx's) modules in every parse worker — repository
code, run as the user, outside any sandbox. Then `spawn.prepare` gives the child the parent's
``sys.path`` (``''`` as the directory the parent started in) and changes to the parent's
directory, so a tree the parent stands in is on the child's path for every later import.

Here every such process starts isolated, by construction rather than by looking at names:

- **the interpreter** with ``-I``: no working directory and no script directory on ``sys.path``
  (``-P``), and no ``PYTHON*`` variables (``-E``) nor user site (``-s``). ``-I`` rather than ``-P``
  alone because ``PYTHONPATH`` with an empty or relative entry (``PYTHONPATH=:/opt/x`` is a
  common slip) names the working directory again, and a ``-P`` child would import from it as it
  starts. What the child needs beyond the interpreter's own library and site-packages (repoctx
  found through ``PYTHONPATH``, say) comes back with the parent's path, below;
- **the path** the child gets from the parent (`child_sys_path`): the parent's ``sys.path`` less
  ``''`` and every entry that is the working directory or inside the indexed tree. The directory
  repoctx itself was imported from stays (it is what the user runs), moved last so that Python's
  own modules win over anything planted beside it;
- **the working directory**: ``/`` (`NEUTRAL_DIR`), where workers change to instead of the
  parent's (they are given absolute paths);
- **no re-run of the parent's main module** in workers: they run repoctx's own functions only,
  and the parent's main may be a script inside the tree.

`spawn_context` is the multiprocessing context for pools and helpers; `start_tracker` starts
multiprocessing's resource tracker the same way (it is shared by every pool of the process, and
started by the first one that needs it); `python_env` is for a Python command line that
repoctx's own code starts with `subprocess` (the detached watcher).
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from multiprocessing import context, process, reduction, resource_tracker, spawn, util
from multiprocessing.popen_spawn_posix import Popen as _SpawnPopen
from pathlib import Path

#: Where isolated processes work: it exists everywhere, and no user or repository writes there.
NEUTRAL_DIR = os.path.abspath(os.sep)
#: The directory repoctx's packages were imported from: the code the user chose to run.
OWN_ROOT = str(Path(__file__).resolve().parents[2])


def _real(path: str) -> str:
    return os.path.realpath(path)


def _inside(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree.rstrip(os.sep) + os.sep)


@functools.cache
def _interpreter_path() -> frozenset[str]:
    """The ``sys.path`` this interpreter gives itself, isolated (``-I``, started in `/`): its
    standard library and its own site-packages (with what their ``.pth`` files add). Trusted as
    the interpreter is, even inside the indexed tree: a virtualenv kept in the repository
    (`make run` indexes the checkout whose `.venv` repoctx runs from), or the standard library
    indexed as a corpus, is what the workers themselves run on."""
    try:
        out = subprocess.run(
            [spawn.get_executable(), "-I", "-c", "import sys; print('\\0'.join(sys.path))"],
            cwd=NEUTRAL_DIR, capture_output=True, text=True, timeout=60, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return frozenset()  # nothing trusted beyond the filter below: safe, if less useful
    return frozenset(_real(p) for p in out.rstrip("\n").split("\0") if os.path.isabs(p))


def child_sys_path(tree: str | os.PathLike | None = None) -> list[str]:
    """This process's ``sys.path`` for a child: without ``''``, relative entries, the working
    directory and everything inside ``tree`` but the interpreter's own entries
    (`_interpreter_path`); repoctx's own directory, if among those dropped, last."""
    cwd = _real(os.getcwd())
    root = _real(os.fspath(tree)) if tree is not None else None
    own = _interpreter_path()
    kept: list[str] = []
    last: list[str] = []
    for entry in sys.path:
        if not isinstance(entry, str):
            continue
        if os.path.isabs(entry) and _real(entry) in own:
            if entry not in kept:
                kept.append(entry)
            continue
        # '' and relative entries name wherever the process happens to be: resolved here,
        # the child (elsewhere) would read them differently anyway.
        path = _real(entry or cwd)
        if path == cwd or (root is not None and _inside(path, root)) or not os.path.isabs(entry):
            if path == OWN_ROOT and path not in last:
                last.append(path)
            continue
        if entry not in kept:
            kept.append(entry)
    return kept + [p for p in last if p not in kept]


def interpreter_args() -> list[str]:
    """The interpreter and flags of an isolated child: this process's own flags (warnings,
    ``-X`` options, optimisation) plus ``-I``."""
    return [spawn.get_executable(), "-I", *util._args_from_interpreter_flags()]


def python_env(tree: str | os.PathLike | None = None,
               environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a Python command line (``python -c …`` of repoctx's own) started
    with `subprocess` in `NEUTRAL_DIR`: ``PYTHONSAFEPATH`` (no working directory on its path)
    and ``PYTHONPATH`` set to `child_sys_path` (the parent's path, less the tree). The command
    line itself stays the caller's; the child's own children are isolated by this module."""
    env = dict(os.environ if environ is None else environ)
    env["PYTHONSAFEPATH"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(child_sys_path(tree))
    return env


# -- multiprocessing ------------------------------------------------------------------------


def start_tracker() -> None:
    """Start multiprocessing's resource tracker isolated, unless one is running. The stdlib
    starts it on first use from the working directory (``-c``); it is one per process and
    lives as long as the process, so the first pool of a build in a repository would start it
    there. Started here first, the stdlib finds it running and starts none."""
    tracker = resource_tracker._resource_tracker
    with tracker._lock:
        if tracker._fd is not None:
            if tracker._check_alive():
                return
            # Dead (killed): cleaned up as the stdlib does, then started again, isolated.
            os.close(tracker._fd)
            try:
                if tracker._pid is not None:
                    os.waitpid(tracker._pid, 0)
            except ChildProcessError:
                pass
            tracker._fd = tracker._pid = None
        fds = []
        # Its stderr is ours, where we have one (a daemon's or a captured one may have no fd).
        with contextlib.suppress(AttributeError, ValueError, OSError):
            fds.append(sys.stderr.fileno())
        r, w = os.pipe()
        try:
            fds.append(r)
            code = (f"import os; os.chdir({NEUTRAL_DIR!r}); "
                    f"from multiprocessing.resource_tracker import main; main({r})")
            args = [*interpreter_args(), "-c", code]
            # As the stdlib does (bpo-33613): the tracker must not die of a Ctrl-C meant for
            # us before it has set up its handlers.
            signals = {signal.SIGINT, signal.SIGTERM}
            signal.pthread_sigmask(signal.SIG_BLOCK, signals)
            try:
                pid = util.spawnv_passfds(args[0], args, fds)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)
        except BaseException:
            os.close(w)
            raise
        else:
            tracker._fd, tracker._pid = w, pid
        finally:
            os.close(r)


class IsolatedProcess(process.BaseProcess):
    """A spawned process started isolated (see the module docstring); ``tree`` is the indexed
    tree, kept off its path."""

    _start_method = "spawn"

    def __init__(self, *args, tree: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._tree = tree

    @staticmethod
    def _Popen(process_obj: IsolatedProcess) -> _IsolatedPopen:
        return _IsolatedPopen(process_obj)


class _IsolatedPopen(_SpawnPopen):
    """CPython's spawn `Popen._launch` (3.11), with an isolated command line and preparation
    data (there is no hook for either)."""

    def _launch(self, process_obj: IsolatedProcess) -> None:
        start_tracker()
        tracker_fd = resource_tracker.getfd()
        self._fds.append(tracker_fd)
        prep_data = preparation_data(process_obj._name, process_obj._tree)
        fp = io.BytesIO()
        context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, fp)
            reduction.dump(process_obj, fp)
        finally:
            context.set_spawning_popen(None)

        parent_r = child_w = child_r = parent_w = None
        try:
            parent_r, child_w = os.pipe()
            child_r, parent_w = os.pipe()
            prog = ("from multiprocessing.spawn import spawn_main; "
                    f"spawn_main(tracker_fd={tracker_fd!r}, pipe_handle={child_r!r})")
            cmd = [*interpreter_args(), "-c", prog, "--multiprocessing-fork"]
            self._fds.extend([child_r, child_w])
            self.pid = util.spawnv_passfds(cmd[0], cmd, self._fds)
            self.sentinel = parent_r
            with open(parent_w, "wb", closefd=False) as f:
                f.write(fp.getbuffer())
        finally:
            self.finalizer = util.Finalize(self, util.close_fds,
                                           [fd for fd in (parent_r, parent_w) if fd is not None])
            for fd in (child_r, child_w):
                if fd is not None:
                    os.close(fd)


def preparation_data(name: str, tree: str | None) -> dict:
    """`spawn.get_preparation_data`, isolated: the path less the tree, a neutral directory,
    and no main module to run again."""
    data = spawn.get_preparation_data(name)
    data["sys_path"] = child_sys_path(tree)
    data["dir"] = data["orig_dir"] = NEUTRAL_DIR
    data.pop("init_main_from_name", None)
    data.pop("init_main_from_path", None)
    return data


class IsolatedContext(context.BaseContext):
    """A spawn context whose processes start isolated from ``tree`` (and from the working
    directory): pass it as ``mp_context`` to a pool, or start ``ctx.Process`` directly."""

    _name = "spawn"

    def __init__(self, tree: str | os.PathLike | None = None) -> None:
        self._tree = os.fspath(tree) if tree is not None else None

    def Process(self, *args, **kwargs) -> IsolatedProcess:  # noqa: N802 (multiprocessing's name)
        return IsolatedProcess(*args, tree=self._tree, **kwargs)


def spawn_context(tree: str | os.PathLike | None = None) -> IsolatedContext:
    """The context for repoctx's worker processes (spawn: LanceDB, used by the same process,
    is not fork-safe). Starts the resource tracker now: a pool's queues register their locks
    with it before any worker starts."""
    start_tracker()
    return IsolatedContext(tree)
