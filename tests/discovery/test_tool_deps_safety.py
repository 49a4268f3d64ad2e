"""What a tool's dependencies may run, and when: nothing outside the sandbox (``_discovery.tool_envs``, rule 6).

Through the real ``xcsh-run`` command, with local packages made here: a wheel
whose ``.pth`` file and ``sitecustomize`` module would run code when the
environment's interpreter starts, and a source distribution whose ``setup.py``
would run code at install. Each would write a marker file; none may. The
environment also needs msgspec from the package index: those tests skip,
saying so, when it cannot be reached. What the installer sees of the host's
environment is tested on ``installer_environ``, the seam the build uses: the
installer's own environment cannot be observed from a package without running
a package's code, which is what these rules forbid.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import io
import json
import os
import subprocess
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.conftest import XCSH_RUN
from tests.discovery.test_tool_deps import CLI_SECONDS, index
from xcsh_run._discovery.tool_envs import installer_environ

pytestmark = pytest.mark.timeout(900)
__all__ = ["index"]  # the fixture, used by name


WHEEL = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def evil_wheel(folder: Path, marker: Path) -> Path:
    """``evilpkg``: an importable ``pkg``, and two files that would run code at every interpreter start."""
    code = f"import os; open({str(marker)!r}, 'w').write('ran')"
    files = {
        "pkg/__init__.py": b"VALUE = 42\n",
        "evil.pth": (code + "\n").encode(),
        "sitecustomize.py": (code + "\n").encode(),
        "usercustomize.py": (code + "\n").encode(),
        "evilpkg-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: evilpkg\nVersion: 0.1\n",
        "evilpkg-0.1.dist-info/WHEEL": WHEEL,
    }
    record = [_record_line(name, data) for name, data in files.items()]
    record.append("evilpkg-0.1.dist-info/RECORD,,")
    path = folder / "evilpkg-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for name, data in files.items():
            whl.writestr(name, data)
        whl.writestr("evilpkg-0.1.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def evil_sdist(folder: Path, marker: Path) -> Path:
    """``sdistpkg``, a source distribution only: its ``setup.py`` writes ``marker`` when it runs."""
    setup = f"open({str(marker)!r}, 'w').write('ran')\n" + "from setuptools import setup\nsetup(name='sdistpkg')\n"
    files = {
        "sdistpkg-0.1/setup.py": setup.encode(),
        "sdistpkg-0.1/PKG-INFO": b"Metadata-Version: 2.1\nName: sdistpkg\nVersion: 0.1\n",
    }
    path = folder / "sdistpkg-0.1.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def tool(name: str, dependency: str) -> str:
    block = f"# /// script\n# dependencies = [{json.dumps(dependency)}]\n# ///\n"
    return block + textwrap.dedent(
        f"""
        import json


        def factory(api):
            def execute(tool_call_id, params, on_update, ctx, signal):
                import pkg

                return {{"content": [{{"type": "text", "text": json.dumps(pkg.VALUE)}}], "details": None}}

            return api.pi.CustomTool(name={name!r}, label={name!r}, description="imports pkg",
                                     parameters={{"type": "object"}}, execute=execute)
        """
    )


def write_tool(folder: Path, name: str, text: str) -> None:
    tools = folder / ".xcsh" / "tools"
    tools.mkdir(parents=True, exist_ok=True)
    (tools / f"{name}.py").write_text(text)


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [XCSH_RUN, *args], cwd=cwd, env=env if env is not None else dict(os.environ), capture_output=True,
        text=True, timeout=CLI_SECONDS, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.parametrize("sandbox", ["contained", "strict"])
def test_no_installed_file_runs_when_the_worker_starts(index: None, sandbox: str, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = evil_wheel(wheels, marker)
    write_tool(tmp_path, "evil", tool("evil", f"evilpkg @ {wheel.as_uri()}"))
    proc = cli("evil", "--sandbox", sandbox, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "42" in proc.stdout  # the package is installed and imported
    assert not marker.exists()  # neither its .pth line nor its sitecustomize/usercustomize ran, at build or start
    envs = Path(os.environ["XDG_CACHE_HOME"]) / "xcsh-run" / "envs"
    (env,) = [p for p in envs.iterdir() if p.is_dir()]
    assert (env / "xcsh-run-env.json").is_file()  # complete: the marker, written last, is there
    assert list(env.glob("lib/python*/site-packages/evil.pth"))  # installed, just never executed


def test_a_source_distribution_named_directly_is_a_load_error_before_any_install(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    sdist = evil_sdist(tmp_path, marker)
    write_tool(tmp_path, "sdist", tool("sdist", f"sdistpkg @ {sdist.as_uri()}"))
    proc = cli("list", "--json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # the module failed to load
    (error,) = json.loads(proc.stdout)["errors"]
    assert "names a source, not a wheel: only wheels are installed, never built" in error["message"]
    assert "PIP_FIND_LINKS" in error["message"]
    assert not marker.exists()
    assert not (Path(os.environ["XDG_CACHE_HOME"]) / "xcsh-run" / "envs").exists()  # nothing was built


def test_a_package_with_only_a_source_distribution_is_a_load_error(index: None, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    links = tmp_path / "links"
    links.mkdir()
    evil_sdist(links, marker)
    write_tool(tmp_path, "sdist", tool("sdist", "sdistpkg==0.1"))
    env = {**os.environ, "XCSH_RUN_ENV_INSTALLER": "pip", "PIP_FIND_LINKS": str(links)}
    proc = cli("list", "--json", cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stderr  # the module failed to load
    (error,) = json.loads(proc.stdout)["errors"]
    message = error["message"]
    assert "--only-binary :all:" in message  # the command, as typed
    assert "Only wheels are installed, never a source distribution" in message
    assert "PIP_FIND_LINKS" in message and "UV_FIND_LINKS" in message
    quoted = [line for line in message.splitlines() if line.startswith("  ")]  # the installer's own lines
    assert any("sdistpkg" in line for line in quoted), message
    assert not marker.exists()


def test_a_wheel_that_requires_a_source_distribution_by_url_does_not_get_it_built(index: None, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    sdist = evil_sdist(tmp_path, marker)
    files = {
        "wrap/__init__.py": b"",
        "wrapper-0.1.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: wrapper\nVersion: 0.1\nRequires-Dist: sdistpkg @ {sdist.as_uri()}\n"
        ).encode(),
        "wrapper-0.1.dist-info/WHEEL": WHEEL,
    }
    wheel = tmp_path / "wrapper-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as whl:
        for name, data in files.items():
            whl.writestr(name, data)
        record = [_record_line(name, data) for name, data in files.items()]
        whl.writestr("wrapper-0.1.dist-info/RECORD", "\n".join([*record, "wrapper-0.1.dist-info/RECORD,,"]) + "\n")
    write_tool(tmp_path, "wrapped", tool("wrapped", f"wrapper @ {wheel.as_uri()}"))
    proc = cli("list", "--json", cwd=tmp_path, env={**os.environ, "XCSH_RUN_ENV_INSTALLER": "pip"})
    assert proc.returncode == 1, proc.stderr  # the module failed to load
    (error,) = json.loads(proc.stdout)["errors"]
    assert "Only wheels are installed" in error["message"]
    assert not marker.exists()


def test_the_installer_sees_an_allow_list_of_the_environment() -> None:
    host = {
        "PATH": "/usr/bin", "HOME": "/home/u", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TMPDIR": "/tmp/t",
        "HTTPS_PROXY": "http://proxy:3128", "no_proxy": "localhost", "XDG_CACHE_HOME": "/c",
        "PIP_INDEX_URL": "https://idx/simple", "PIP_FIND_LINKS": "/w", "UV_FIND_LINKS": "/w", "PIP_CERT": "/ca",
        "SSL_CERT_FILE": "/ca.pem", "UV_INDEX_CORP_PASSWORD": "for-the-index",
        "XCSH_TEST_API_TOKEN": "secret", "AWS_SECRET_ACCESS_KEY": "secret", "GITHUB_TOKEN": "secret",
        "OPENAI_API_KEY": "secret", "PYTHONPATH": "/evil", "PYTHONSTARTUP": "/evil.py", "LD_PRELOAD": "/x.so",
        "PIP_NO_BINARY": ":all:", "UV_NO_BUILD": "false", "SSH_AUTH_SOCK": "/agent",
    }  # fmt: skip
    seen = installer_environ(host)
    assert seen == {k: host[k] for k in (
        "PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "HTTPS_PROXY", "no_proxy", "XDG_CACHE_HOME", "PIP_INDEX_URL",
        "PIP_FIND_LINKS", "UV_FIND_LINKS", "PIP_CERT", "SSL_CERT_FILE", "UV_INDEX_CORP_PASSWORD",
    )}  # fmt: skip


def test_a_pip_without_python_option_is_refused_saying_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    # A seam: installing an old pip into the test's own environment is not an option.
    from xcsh_run._discovery import tool_envs as _envs

    monkeypatch.setenv("XCSH_RUN_ENV_INSTALLER", "pip")
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "22.2.2")
    with pytest.raises(_envs.EnvError, match=r"needs pip >= 22\.3; .* has pip 22\.2\.2: upgrade it"):
        _envs._installer()
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "22.3rc1")
    assert _envs._installer() == "pip"
