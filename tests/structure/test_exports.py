"""The public API surface is pinned: adding or removing a name is a deliberate change."""

from __future__ import annotations

import xcsh_run
import xcsh_run.pi


def test_runner_exports() -> None:
    import types

    # Subpackages imported so far are attributes of the package too; they are not names of its face.
    public = sorted(
        name
        for name in dir(xcsh_run)
        if not name.startswith("_") and not isinstance(getattr(xcsh_run, name), types.ModuleType)
    )
    assert sorted(xcsh_run.__all__) == sorted(set(public) - {"annotations"})
    assert xcsh_run.__all__ == sorted(xcsh_run.__all__)
    for name in xcsh_run.__all__:
        obj = getattr(xcsh_run, name)
        assert getattr(obj, "__module__", "xcsh_run") == "xcsh_run", name


def test_authoring_exports() -> None:
    assert xcsh_run.pi.__all__ == [
        "AbortSignal",
        "AudioContent",
        "CustomTool",
        "EmbeddedResource",
        "EventBus",
        "ExecResult",
        "Icon",
        "ImageContent",
        "Requires",
        "ResourceContents",
        "ResourceLink",
        "SessionManager",
        "TextContent",
        "ToolAPI",
        "ToolAnnotations",
        "ToolCancelled",
        "ToolContext",
        "ToolError",
        "ToolResult",
        "UI",
    ]


def test_worker_package_imports_nothing_heavy() -> None:
    import subprocess
    import sys

    # Neither a heavy library nor any host module of xcsh_run: only its face, xcsh_run.pi and the worker.
    code = (
        "import sys, xcsh_run.worker._runtime.loop, xcsh_run.pi; print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('trio', 'typer', 'psutil', 'jsonschema') "
        "or (m.startswith('xcsh_run.') and not m.startswith(('xcsh_run.worker', 'xcsh_run.pi')))))"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_import_runner_does_not_import_hypothesis() -> None:
    """Hypothesis is for the fuzzer alone: the library, and every command but `fuzz`, do not import it."""
    import subprocess
    import sys

    code = (
        "import sys, xcsh_run, xcsh_run._cli.run; xcsh_run.open_runner; xcsh_run.Runner; "
        "print(sorted(m for m in sys.modules if m.startswith('hypothesis')))"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
