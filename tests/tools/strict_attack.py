"""Attack probes for tests/test_escape_strict.py: one tool, ``probe``, {"name": <probe>, ...args}.

Returns {"ok", "errno", "error", "value"} as details and never raises. Copied
into the test's tmp_path with ``payload.bin`` (a copy of /bin/true) beside it.
"""

import ctypes
import errno
import multiprocessing
import os
import shutil
import subprocess
import tempfile
import threading

from worker.pi import CustomTool

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
HERE = os.path.dirname(os.path.abspath(__file__))
NS_FLAGS = 0x10000000 | 0x40000000 | 0x04000000  # CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWUTS
SIGCHLD = 17


def _sys(nr, *args):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _run(argv):
    return subprocess.run(argv, check=True, capture_output=True, timeout=20).stdout.decode()[:40]


def _copy_to_tmp():
    # The bytes of a program, written by the test beside this module (readable under strict).
    # Created executable (as root, strict fakes chmod, but the mode given to open() stands).
    target = os.path.join(tempfile.mkdtemp(), "mytrue")
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755)
    with open(os.path.join(HERE, "payload.bin"), "rb") as src, os.fdopen(fd, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return target


def _memfd_exec():
    fd = _sys(319, ctypes.addressof(ctypes.create_string_buffer(b"x")), 0)  # memfd_create("x", 0)
    with open(os.path.join(HERE, "payload.bin"), "rb") as f:
        os.write(fd, f.read())
    pid = os.fork()
    if pid == 0:
        try:
            os.execve(fd, ["mytrue"], {})  # fexecve: execveat(fd, "", AT_EMPTY_PATH)
        finally:
            os._exit(126)
    os.close(fd)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _in_child(start):
    # The child of a raw clone continues here, in a copy of this process: it
    # only tries sethostname (which a new UTS namespace allows) and exits.
    pid = start()
    if pid == 0:
        name = ctypes.create_string_buffer(b"escaped")
        os._exit(0 if libc.sethostname(name, 7) == 0 else 1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _clone3():
    args = (ctypes.c_uint64 * 11)()  # struct clone_args, CLONE_ARGS_SIZE_VER2 (88 bytes)
    args[0] = NS_FLAGS
    args[4] = SIGCHLD  # exit_signal; stack 0: the child runs on a copy of ours, as after fork
    return _in_child(lambda: _sys(435, ctypes.addressof(args), ctypes.sizeof(args)))


def _spawn_process():
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(target=os._exit, args=(7,))
    child.start()
    child.join(20)
    return child.exitcode


def _thread():
    out = []
    t = threading.Thread(target=lambda: out.append(threading.get_ident()))
    t.start()
    t.join()
    return len(out)


def _fork():
    pid = os.fork()
    if pid == 0:
        os._exit(5)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _home_and_tmp():
    with open(os.path.join(os.environ["HOME"], "h.txt"), "w") as f:
        f.write("home")
    with open(os.path.join(os.environ["TMPDIR"], "t.txt"), "w") as f:
        f.write("tmp")
    fd, path = tempfile.mkstemp()
    os.close(fd)
    return [os.getuid(), os.getgid(), path.startswith(os.environ["TMPDIR"])]


PROBES = {
    "read": lambda a: open(a["path"]).read(),
    "exec": lambda a: _run(a["argv"]),
    "exec_tmp_copy": lambda a: _run([_copy_to_tmp()]),
    # The exit status: on a noexec mount the loader fails to map the program (127), without an errno.
    "ldso_tmp_copy": lambda a: subprocess.run([a["ldso"], _copy_to_tmp()], capture_output=True, timeout=20).returncode,
    "memfd_exec": lambda a: _memfd_exec(),
    "clone_ns": lambda a: _in_child(lambda: _sys(56, NS_FLAGS | SIGCHLD, 0, 0, 0, 0)),
    "clone3_ns": lambda a: _clone3(),
    # Not CLONE_NEWUSER: unshare refuses it (EINVAL) in a process with threads, as a worker is.
    "unshare_ns": lambda a: _sys(272, 0x40000000 | 0x04000000),
    "sethostname": lambda a: _sys(170, ctypes.addressof(ctypes.create_string_buffer(b"x")), 1),
    "setdomainname": lambda a: _sys(171, ctypes.addressof(ctypes.create_string_buffer(b"x")), 1),
    "spawn_process": lambda a: _spawn_process(),
    "thread": lambda a: _thread(),
    "fork": lambda a: _fork(),
    "home_and_tmp": lambda a: _home_and_tmp(),
    "uid": lambda a: os.getuid(),
}


def factory(api):
    def probe(tool_call_id, params, on_update, ctx, signal):
        try:
            outcome = {"ok": True, "errno": None, "error": None, "value": PROBES[params["name"]](params)}
        except OSError as exc:
            outcome = {
                "ok": False,
                "errno": exc.errno,
                "error": errno.errorcode.get(exc.errno or 0, str(exc)),
                "value": None,
            }
        except Exception as exc:
            outcome = {"ok": False, "errno": None, "error": repr(exc), "value": None}
        return {"content": [{"type": "text", "text": str(outcome)}], "details": outcome}

    return CustomTool(name="probe", description="strict escape probes", parameters={"type": "object"}, execute=probe)
