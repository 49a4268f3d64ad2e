"""``python -m worker``: started by the xcsh-run host, never by hand (``--zygote S``: its fork server)."""

import sys

if sys.argv[1:2] == ["--zygote"]:
    from worker._zygote import serve

    serve(int(sys.argv[2]))

from worker._loop import main

main()
