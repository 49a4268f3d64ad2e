"""``python -m worker``: started by the xcsh-run host, never by hand (``--zygote S``: its fork server)."""

import sys

if sys.argv[1:2] == ["--zygote"]:
    from worker._contain import set_undumpable
    from worker._zygote import serve

    # The zygote forks unsandboxed processes: no tool of the host's uid may
    # reach its memory or fds through /proc (an exec made it dumpable again).
    set_undumpable()

    serve(int(sys.argv[2]))

from worker._loop import main

main()
