"""A tool that leaves a tree in its TMPDIR that ``shutil.rmtree`` cannot remove on Python 3.11."""

import os

from worker.pi import CustomTool

OBJ = {"type": "object", "properties": {"depth": {"type": "integer"}}, "additionalProperties": False}


def factory(api):
    def deep_tmp(tcid, params, on_update, ctx, signal):
        base = os.environ["TMPDIR"]
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
        # Relative to a directory fd: the path of the deepest folder is far
        # longer than PATH_MAX, which is part of what makes it hostile.
        for _ in range(params.get("depth", 1100)):
            os.mkdir("d", dir_fd=fd)
            with open(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=fd), "w") as f:
                f.write("x")
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(fd)
        return "built"

    return [CustomTool(name="deep_tmp", description="leaves nested folders", parameters=OBJ, execute=deep_tmp)]
