"""repo_stats: counts the files git tracks that match a glob (the SPEC §2 example)."""

import msgspec


class Params(msgspec.Struct, forbid_unknown_fields=True):
    glob: str = "**/*.py"


def factory(api):
    async def execute(tool_call_id, params: Params, on_update, ctx, signal):
        on_update({"content": [{"type": "text", "text": "Scanning files..."}], "details": {"phase": "scan"}})
        res = await api.exec("git", ["ls-files", params.glob], signal=signal, cwd=api.cwd)
        if res.killed:
            raise RuntimeError("Scan was cancelled")
        if res.code != 0:
            raise RuntimeError(res.stderr or "git ls-files failed")
        files = [f for f in res.stdout.splitlines() if f]
        return {
            "content": [{"type": "text", "text": f"Found {len(files)} files"}],
            "details": {"count": len(files), "sample": files[:10]},
        }

    return api.pi.CustomTool(
        name="repo_stats",
        label="Repo Stats",
        description="Counts tracked files matching a glob",
        parameters=Params,
        execute=execute,
    )
