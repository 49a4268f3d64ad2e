"""``python -m xcsh_run.worker``: started by the xcsh-run host, never by hand (``--zygote S``: its fork server)."""

import sys

if sys.argv[1:2] == ["--zygote"]:
    from xcsh_run.worker._runtime import serve
    from xcsh_run.worker._sandbox import set_undumpable

    # The zygote forks unsandboxed processes: no tool of the host's uid may
    # reach its memory or fds through /proc (an exec made it dumpable again).
    set_undumpable()

    serve(int(sys.argv[2]))

from xcsh_run.worker._runtime import main

main()
