"""Contract tests over real worker processes of both runtimes: every test runs a tool module of
tests/fixtures/tools (Python worker) and its twin of tests/fixtures/js_tools (Bun worker) through the
runner, on real pipes, and asserts the same outcome of both.

Rules:
1. One test body serves both runtimes; the twins share tool names and outputs, so a test never
   branches on the runtime. Where the runtimes genuinely differ (a type's name, a hook's spelling,
   how far cancellation can reach), the test says so in a comment and takes the difference as data.
2. A behaviour only one runtime has is a test with that runtime alone (``only("python")``), with
   a one-line reason.
3. Without Bun, the ``bun`` runtime is skipped as tests/js/ is, and fails under ``CI=true``.
"""
