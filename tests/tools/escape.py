"""Escape probes for the sandbox tests: each tries one thing a confined tool must not do.

The one tool, ``probe``, takes {"name": <probe>, ...args} and returns the outcome as details:
{"ok": bool, "errno": int | None, "error": str | None, "value": any}. Probes never raise.
"""

import ctypes
import errno
import mmap
import os
import shutil
import socket
import subprocess

from worker.pi import CustomTool

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def _tmp():
    # TMPDIR is the private one under contained and strict; none leaves the environment alone.
    return os.environ.get("TMPDIR") or __import__("tempfile").mkdtemp()


def _fresh():
    # A new directory each time: under none, TMPDIR is the host's own and a fixed
    # name ("link", "hard") would still be there on the next run.
    return __import__("tempfile").mkdtemp(dir=_tmp())


def _mount_tmpfs():
    target = __import__("tempfile").mkdtemp(dir=_tmp())
    buf = ctypes.create_string_buffer
    src, dst, kind = buf(b"none"), buf(target.encode()), buf(b"tmpfs")
    _sys(165, ctypes.addressof(src), ctypes.addressof(dst), ctypes.addressof(kind), 0, 0)
    _sys(166, ctypes.addressof(dst), 0)  # umount2: leave nothing mounted on a real host
    return "mounted"


def _sys(nr, *args):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _int80_socketcall():
    # socketcall(SYS_SOCKET, NULL) through the 32-bit entry point, from 64-bit code.
    code = bytes.fromhex("b866000000bb0100000031c9cd80c3")  # eax=102 ebx=1 ecx=0; int 0x80; ret
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    return ctypes.CFUNCTYPE(ctypes.c_int)(address)()


def _connect(family, address):
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.settimeout(2)
        s.connect(address)
    finally:
        s.close()


def _udp_send(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"x", ("127.0.0.1", port))
    finally:
        s.close()


def _write(path, data="escaped"):
    with open(path, "w") as f:
        f.write(data)


def _pool():
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(2) as pool:
        return pool.map(abs, [-1, -2, -3])


def _asyncio():
    import asyncio

    async def main():
        await asyncio.sleep(0)
        return "ran"

    return asyncio.run(main())


def _inside(a):
    tmp = os.environ["TMPDIR"]
    _write(os.path.join(tmp, "a.txt"), "inside")
    os.rename(os.path.join(tmp, "a.txt"), os.path.join(tmp, "b.txt"))
    shutil.copy(os.path.join(tmp, "b.txt"), os.path.join(tmp, "c.txt"))
    with open(os.path.join(tmp, "c.txt")) as f:
        return f.read()


PROBES = {
    # filesystem
    "write_outside": lambda a: _write(a["path"]),
    "read_file": lambda a: open(a["path"]).read()[:20],
    "listdir": lambda a: os.listdir(a["path"])[:3],
    "symlink_write": lambda a: (t := _fresh(), os.symlink(a["target"], os.path.join(t, "link")),
                                _write(os.path.join(t, "link"))) and None,
    "hardlink_in": lambda a: os.link(a["path"], os.path.join(_fresh(), "hard")),
    "rename_out": lambda a: (t := _fresh(), _write(os.path.join(t, "mine")),
                             os.rename(os.path.join(t, "mine"), a["path"])) and None,
    "truncate": lambda a: os.truncate(a["path"], 0),
    "mkdir": lambda a: os.mkdir(a["path"]),
    "unlink": lambda a: os.unlink(a["path"]),
    "chmod": lambda a: (os.chmod(a["path"], 0o777), oct(os.stat(a["path"]).st_mode & 0o777))[1],
    "exec": lambda a: subprocess.run([a["program"], *a.get("args", [])], check=True, capture_output=True).returncode,
    "proc_self_status": lambda a: open("/proc/self/status").read()[:10],
    "proc_environ": lambda a: open(f"/proc/{a['pid']}/environ", "rb").read()[:10],
    "cgroup_escape": lambda a: _write(a["path"], str(os.getpid())),
    # network
    "tcp4": lambda a: _connect(socket.AF_INET, ("127.0.0.1", a["port"])),
    "tcp6": lambda a: _connect(socket.AF_INET6, ("::1", a["port"])),
    "tcp_bind": lambda a: socket.socket().bind(("127.0.0.1", 0)),
    "udp": lambda a: _udp_send(a["port"]),
    "unix_abstract": lambda a: _connect(socket.AF_UNIX, a["address"].encode()),
    "unix_path": lambda a: _connect(socket.AF_UNIX, a["path"]),
    "netlink": lambda a: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close(),
    "io_uring": lambda a: os.close(_sys(425, 8, ctypes.addressof(ctypes.create_string_buffer(120)))),
    "int80_socketcall": lambda a: _int80_socketcall(),
    "x32_socket": lambda a: _sys(41 | 0x40000000, socket.AF_INET, socket.SOCK_STREAM, 0),
    # processes and privileges
    "kill": lambda a: os.kill(a["pid"], 0),
    "ptrace": lambda a: _sys(101, 16, a["pid"], 0, 0),  # PTRACE_ATTACH
    "mount": lambda a: _mount_tmpfs(),
    "unshare": lambda a: _sys(272, 0x40000000),  # CLONE_NEWNET (NEWUSER needs a single thread)
    "no_new_privs": lambda a: libc.prctl(39, 0, 0, 0, 0),  # PR_GET_NO_NEW_PRIVS
    "cap_sys_admin": lambda a: libc.prctl(23, 21, 0, 0, 0),  # PR_CAPBSET_READ CAP_SYS_ADMIN
    "pid": lambda a: os.getpid(),
    # positive controls
    "inside_workdir": _inside,
    "dev_null": lambda a: _write("/dev/null"),
    "socketpair": lambda a: [s.close() for s in socket.socketpair()] and "pair",
    "asyncio": lambda a: _asyncio(),
    "fork_pool": lambda a: _pool(),
    "imports": lambda a: [__import__(m).__name__ for m in ("json", "sqlite3", "decimal", "msgspec", "ssl")],
    "getaddrinfo": lambda a: socket.getaddrinfo("localhost", 80)[0][4][0],
    "env": lambda a: dict(os.environ),
}  # fmt: skip


def factory(api):
    def probe(tool_call_id, params, on_update, ctx, signal):
        try:
            value = PROBES[params["name"]](params)
            outcome = {"ok": True, "errno": None, "error": None, "value": value}
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

    return CustomTool(name="probe", description="sandbox escape probes", parameters={"type": "object"}, execute=probe)
