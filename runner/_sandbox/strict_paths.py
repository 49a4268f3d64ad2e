"""What a ``strict`` worker may read and run: its interpreter's files, and the programs it is allowed.

Computed by the host for Landlock's rules (``_sandbox.worker_config``). The
principle: a worker reads what ``python -I`` in this venv puts on sys.path
and no more, and runs only single files. Both are documented, precisely, in
docs/sandbox.md ("What `strict` guarantees").
"""

from __future__ import annotations

import os
import pwd
import site
import struct
import sys
import sysconfig
from collections.abc import Sequence


def worker_packages() -> list[str]:
    """The folders of the worker package and of msgspec, its one dependency, wherever they are installed."""
    import msgspec as _msgspec

    import xcsh_run.worker as worker

    return [os.path.dirname(worker.__file__), os.path.dirname(_msgspec.__file__)]


# What a worker imports of the host's package: its lazy face (the parent of
# ``xcsh_run.worker``, which loads nothing until asked), the version it answers
# for ``xcsh_run.__version__``, and the authoring API's public name. The rest of
# the host's folder stays unreadable.
WORKER_SIDE_MODULES = ("__init__.py", "_version.py", "pi.py")


def worker_files() -> list[str]:
    """The host package's files a worker imports, with their bytecode where it was compiled."""
    import importlib.util

    host = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this module is _sandbox/strict_paths.py
    files: list[str] = []
    for name in WORKER_SIDE_MODULES:
        source = os.path.join(host, name)
        files.append(source)
        compiled = importlib.util.cache_from_source(source)
        if os.path.exists(compiled):
            files.append(compiled)
    return files


def _site_dirs() -> list[str]:
    """The site-packages of the venv and of the interpreter it was made from (purelib and platlib of both).

    Plus what ``site`` itself names for both prefixes: distributions patch it
    (Debian's dist-packages folders, which a venv with system site-packages uses).
    """
    dirs: list[str] = []
    prefixes = list(dict.fromkeys((sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix)))
    for base in prefixes:
        paths = sysconfig.get_paths(vars={"base": base, "platbase": base})
        dirs += [paths["purelib"], paths["platlib"]]
    dirs += site.getsitepackages(prefixes)
    return list(dict.fromkeys(dirs))


def _pth_paths(site_dir: str) -> list[str]:
    """The folders the ``.pth`` files in ``site_dir`` put on a worker's sys.path (as ``site`` reads them)."""
    found: list[str] = []
    try:
        names = sorted(name for name in os.listdir(site_dir) if name.endswith(".pth"))
    except OSError:
        return found
    for name in names:
        try:
            with open(os.path.join(site_dir, name), encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            # ``import`` lines run code (an editable install's finder): the
            # packages it maps are granted by name (the worker's own below).
            if not line.strip() or line.startswith(("#", "import ", "import\t")):
                continue
            path = os.path.join(site_dir, line.rstrip())
            if os.path.isdir(path):
                found.append(path)
    return found


def python_paths() -> list[str]:
    """What a worker's interpreter reads: exactly what ``python -I`` puts on sys.path, and no more.

    Not the host's own sys.path: its first entry is the host script's folder
    (``python ~/agent.py`` would open all of $HOME), and a venv of the system
    Python has ``base_prefix`` /usr (which would open all of /usr).
    """
    # DESTSHARED is lib-dynload; the zip is the (usually absent) zipped standard library.
    zipped = os.path.join(sys.base_prefix, "lib", f"python{sys.version_info[0]}{sys.version_info[1]}.zip")
    stdlib = [sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib"), zipped,
              sysconfig.get_config_var("DESTSHARED") or ""]  # fmt: skip
    sites = _site_dirs()
    paths = [*stdlib, *sites, *(p_ for site in sites for p_ in _pth_paths(site))]
    # The worker package and its one dependency, wherever they are installed
    # (an editable install maps them from a checkout, whose other files stay closed).
    paths += worker_packages()
    paths += worker_files()
    # A re-executed interpreter (multiprocessing's spawn) finds its venv through this file.
    paths.append(os.path.join(sys.prefix, "pyvenv.cfg"))
    # The interpreter's own library folder: a conda, /usr/local or Homebrew
    # Python links its extension modules (ssl, ctypes, sqlite3) to libraries
    # there, not in /usr/lib. Never a folder as wide as / or one holding a home.
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    if libdir and project_folder(libdir):
        paths.append(libdir)
    elif sysconfig.get_config_var("Py_ENABLE_SHARED") and libdir:
        paths.append(os.path.join(libdir, sysconfig.get_config_var("LDLIBRARY") or ""))
    return sorted(dict.fromkeys(p_ for p_ in paths if p_ and not p_.endswith("/")))


def _elf_interpreter(path: str) -> str | None:
    """The program loader (PT_INTERP) a dynamically linked ELF file names, or None (static, not ELF, unreadable)."""
    try:
        with open(path, "rb") as f:
            header = f.read(64)
            if len(header) < 64 or header[:5] != b"\x7fELF\x02":  # 64-bit ELF only: strict is x86_64
                return None
            (phoff,) = struct.unpack_from("<Q", header, 32)
            phentsize, phnum = struct.unpack_from("<HH", header, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            for i in range(phnum):
                (kind,) = struct.unpack_from("<I", table, i * phentsize)
                if kind == 3:  # PT_INTERP
                    (offset,) = struct.unpack_from("<Q", table, i * phentsize + 8)
                    (size,) = struct.unpack_from("<Q", table, i * phentsize + 32)
                    f.seek(offset)
                    return os.path.realpath(f.read(size).rstrip(b"\0").decode())
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    return None


def _script_interpreter(path: str) -> str | None:
    """The interpreter a ``#!`` script names, or None."""
    try:
        with open(path, "rb") as f:
            first = f.readline(256)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].split()
    return os.path.realpath(words[0].decode(errors="replace")) if words else None


def executables(programs: Sequence[str]) -> list[str]:
    """The files the kernel must open for execution to run ``programs``: each, its ``#!`` interpreter, their loaders.

    Landlock checks EXECUTE on the ELF loader too (measured), so ld.so is
    among them; through it a tool can map, and so run, any ELF file it can
    read (see docs/sandbox.md).
    """
    found: list[str] = []
    for program in programs:
        chain = [program]
        interpreter = _script_interpreter(program)
        if interpreter is not None:
            chain.append(interpreter)
        for file in chain:
            found.append(file)
            loader = _elf_interpreter(file)
            if loader is not None:
                found.append(loader)
    return list(dict.fromkeys(found))


def _homes() -> list[str]:
    homes = [os.path.expanduser("~")]
    try:
        homes.append(pwd.getpwuid(os.geteuid()).pw_dir)
    except KeyError:
        pass
    return [os.path.realpath(home) for home in homes if home and home != "~"]


def project_folder(path: str) -> bool:
    """May ``path`` be granted whole as a tool's or project's folder? Not /, nor a folder holding a home directory."""
    if not path:
        return False
    real = os.path.realpath(path)
    return real != "/" and not any(home == real or home.startswith(real.rstrip("/") + "/") for home in _homes())


def tool_node_modules(module: str, root: str) -> list[str]:
    """The ``node_modules`` folders a JavaScript tool resolves its packages from, read-only at ``strict``.

    From the tool's folder (the module's, or the package folder itself) up to the
    project ``root`` inclusive, as Bun's resolver walks. For a tool outside the
    project (a user folder such as ``~/.pi/agent/tools/NAME``), only the one in
    its own folder: strict never opens the parents of such a tool. Each folder
    must pass :func:`project_folder`, so a home's node_modules is never granted.
    """
    real_root = os.path.realpath(root)
    start = os.path.realpath(module)
    folder = start if os.path.isdir(start) else os.path.dirname(start)
    if folder != real_root and not folder.startswith(real_root.rstrip("/") + "/"):
        own = os.path.join(folder, "node_modules")
        return [own] if os.path.isdir(own) and project_folder(folder) else []
    found: list[str] = []
    while True:
        candidate = os.path.join(folder, "node_modules")
        if os.path.isdir(candidate) and project_folder(folder):
            found.append(candidate)
        if folder == real_root or folder == os.path.dirname(folder):
            return found
        folder = os.path.dirname(folder)
