"""The tools the MCP conformance suite (``@modelcontextprotocol/conformance`` 0.2.0-alpha.12) calls by name.

Served by ``tests/conformance/run.py`` (``make conformance``) with ``xcsh-run serve --http``, for
the 2025-11-25 and the 2026-07-28 requirement sets. Each tool does what the suite's scenario
that calls it asks of the server under test (docs/conformance.md lists them); the texts, URIs
and schemas are the suite's own.

The 2026-07-28 tools (input-required-result-*, server-stateless, tasks-*) are written with the
same blocking requests as the others (``api.ui.elicit``, ``api.sample``, ``api.roots``):
turning a request into an ``InputRequiredResult`` and the client's answer back into its value,
keeping ``requestState`` and running a call as a task are the server's work, not the tool's.
A tool names a request with ``key=`` where the suite wants a key of its own (``user_name``),
and declares ``task_support`` where a scenario needs a task.

Where the host API has no way yet to do what a scenario needs, the tool uses the
nearest thing it has and says so in its docstring. ``api.ui.elicit`` and
``api.sample`` are looked up at call time: a host that offers them is used at once.
"""

import asyncio
import base64
import json
import os
import struct
import time
import zlib

# Tools without arguments: the suite sends `{}` or no `arguments` at all.
NO_ARGS = {"type": "object", "properties": {}, "additionalProperties": False}


def _png_1x1_red() -> str:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    pixels = zlib.compress(b"\x00\xff\x00\x00")  # filter byte 0, then one red pixel
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    return base64.b64encode(png).decode()


def _wav_silence() -> str:
    rate, samples = 8000, 80  # 10 ms of 8-bit mono silence
    data = b"\x80" * samples
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate, 1, 8)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return base64.b64encode(b"RIFF" + struct.pack("<I", len(body)) + body).decode()


PNG = _png_1x1_red()
WAV = _wav_silence()

ELICIT_SCHEMA = {
    "type": "object",
    "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    },
    "required": ["username", "email"],
}

SEP1034_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {
            "type": "string",
            "description": "User status",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
    "required": [],
}

SEP1330_SCHEMA = {
    "type": "object",
    "properties": {
        "untitledSingle": {
            "type": "string",
            "description": "Select one option",
            "enum": ["option1", "option2", "option3"],
        },
        "titledSingle": {
            "type": "string",
            "description": "Select one option with titles",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "description": "Select one option (legacy)",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "description": "Select multiple options",
            "minItems": 1,
            "maxItems": 3,
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
        "titledMulti": {
            "type": "array",
            "description": "Select multiple options with titles",
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
    "required": [],
}

# The dialect, $defs and additionalProperties (SEP-1613), and from 2026-07-28 the broader
# vocabulary (SEP-2106): an $anchor inside $defs, allOf/anyOf, if/then/else; each must reach
# tools/list as it is. A call needs a phone or an email, the phone when contactMethod says so.
JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


REGION_PARAMS = {
    "type": "object",
    "properties": {"region": {"type": "string", "description": "Where to run", "x-mcp-header": "Region"}},
    "required": ["region"],
}
NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
CONFIRM_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
COLOR_SCHEMA = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}
DELETE_SCHEMA = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}

GREET_PARAMS = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "Who to greet"}},
    "required": ["name"],
}
SLOW_COMPUTE_PARAMS = {
    "type": "object",
    "properties": {
        "seconds": {"type": "number", "minimum": 0, "description": "How long to work"},
        "label": {"type": "string", "description": "A name for this run, repeated in the result"},
    },
    "required": ["seconds"],
}
FILENAME_PARAMS = {
    "type": "object",
    "properties": {"filename": {"type": "string", "description": "The file to delete"}},
    "required": ["filename"],
}


def _text(text):
    return {"content": [{"type": "text", "text": text}], "details": None}


def factory(api):
    def elicit(message, schema):
        """``elicitation/create`` with the scenario's schema; ``api.ui.input`` where no form API exists yet."""
        form = getattr(api.ui, "elicit", None)
        if form is not None:
            answer = form(message, schema)
            return answer.get("action"), answer.get("content")
        value = api.ui.input(message)
        if value is None:
            return "decline", None
        return "accept", {"response": value}

    def answered(answer, key):
        """The value of ``key`` in an accepted elicitation, else None."""
        if answer.get("action") != "accept":
            return None
        return (answer.get("content") or {}).get(key)

    def sampled_text(answer):
        content = (answer or {}).get("content") or {}
        return content.get("text") if isinstance(content, dict) else None

    def simple_text(tool_call_id, params, on_update, ctx, signal):
        return _text("This is a simple text response for testing.")

    def image(tool_call_id, params, on_update, ctx, signal):
        return {"content": [{"type": "image", "data": PNG, "mimeType": "image/png"}], "details": None}

    def audio(tool_call_id, params, on_update, ctx, signal):
        return {"content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}], "details": None}

    def embedded_resource(tool_call_id, params, on_update, ctx, signal):
        resource = {
            "uri": "test://embedded-resource",
            "mimeType": "text/plain",
            "text": "This is an embedded resource content.",
        }
        return {"content": [{"type": "resource", "resource": resource}], "details": None}

    def multiple_content_types(tool_call_id, params, on_update, ctx, signal):
        resource = {
            "uri": "test://mixed-content-resource",
            "mimeType": "application/json",
            "text": json.dumps({"test": "data", "value": 123}),
        }
        content = [
            {"type": "text", "text": "Multiple content types test:"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            {"type": "resource", "resource": resource},
        ]
        return {"content": content, "details": None}

    def with_logging(tool_call_id, params, on_update, ctx, signal):
        # The suite wants three `notifications/message` at info level, ~50 ms apart.
        api.logger.info("Tool execution started")
        time.sleep(0.05)
        api.logger.info("Tool processing data")
        time.sleep(0.05)
        api.logger.info("Tool execution completed")
        return _text("Tool with logging executed successfully")

    def with_progress(tool_call_id, params, on_update, ctx, signal):
        # Three progress notifications (0, 50, 100 of 100), ~50 ms apart.
        for step in (0, 50, 100):
            if step:
                time.sleep(0.05)
            text = f"Completed step {step} of 100"
            on_update({"content": [{"type": "text", "text": text}], "details": {"progress": step, "total": 100}})
        return _text("Tool with progress executed successfully")

    def error_handling(tool_call_id, params, on_update, ctx, signal):
        raise RuntimeError("This tool intentionally returns an error for testing")

    def reconnection(tool_call_id, params, on_update, ctx, signal):
        # The server, not the tool, closes the call's SSE stream mid-call (SEP-1699);
        # the tool only lasts long enough for the client to reconnect.
        time.sleep(0.5)
        return _text(
            "Reconnection test completed successfully. If you received this, "
            "the client properly reconnected after stream closure."
        )

    def sampling(tool_call_id, params, on_update, ctx, signal):
        sample = getattr(api, "sample", None)
        if sample is None:
            return _text("Sampling not supported: the host API has no sampling request")
        messages = [{"role": "user", "content": {"type": "text", "text": params["prompt"]}}]
        answer = sample(messages, max_tokens=100)
        if answer is None:
            return _text("Sampling not available: the client offers no sampling")
        content = answer.get("content") or {}
        return _text(f"LLM response: {content.get('text', 'No response')}")

    def elicitation(tool_call_id, params, on_update, ctx, signal):
        action, content = elicit(params["message"], ELICIT_SCHEMA)
        return _text(f"User response: action={action}, content={json.dumps(content or {})}")

    def elicitation_defaults(tool_call_id, params, on_update, ctx, signal):
        action, content = elicit("Please review and update the form fields with defaults", SEP1034_SCHEMA)
        return _text(f"Elicitation completed: action={action}, content={json.dumps(content or {})}")

    def elicitation_enums(tool_call_id, params, on_update, ctx, signal):
        action, content = elicit("Please select options from the enum fields", SEP1330_SCHEMA)
        return _text(f"Elicitation completed: action={action}, content={json.dumps(content or {})}")

    def json_schema_2020_12(tool_call_id, params, on_update, ctx, signal):
        return _text(f"JSON Schema 2020-12 tool called with: {json.dumps(params)}")

    # --- 2026-07-28: input-required-result-* (SEP-2322), server-stateless (SEP-2575) ---------------

    def irr_elicitation(tool_call_id, params, on_update, ctx, signal):
        # The suite looks for this request under the key `user_name` (and answers it by that key).
        name = answered(api.ui.elicit("What is your name?", NAME_SCHEMA, key="user_name"), "name")
        return _text(f"Hello, {name}!" if name is not None else "No name given")

    def irr_list_roots(tool_call_id, params, on_update, ctx, signal):
        roots = api.roots(key="client_roots")
        if roots is None:
            return _text("The client shares no roots")
        return _text("Roots: " + ", ".join(f"{r.get('name', r['uri'])} ({r['uri']})" for r in roots))

    async def irr_multiple_inputs(tool_call_id, params, on_update, ctx, signal):
        # Three requests at once, of three kinds: one InputRequiredResult carries them all.
        name, greeting, roots = await asyncio.gather(
            api.ui.elicit("What is your name?", NAME_SCHEMA, key="user_name"),
            api.sample("Generate a greeting", max_tokens=50, key="greeting"),
            api.roots(key="client_roots"),
        )
        count = len(roots) if roots is not None else 0
        return _text(f"{sampled_text(greeting)} {answered(name, 'name')}! ({count} roots)")

    def irr_sampling(tool_call_id, params, on_update, ctx, signal):
        answer = api.sample("What is the capital of France?", max_tokens=100)
        text = sampled_text(answer)
        return _text(text if text is not None else "Sampling not available: the client offers no sampling")

    def irr_request_state(tool_call_id, params, on_update, ctx, signal):
        # "state-ok": the server got back and checked the requestState it minted for this call.
        ok = answered(api.ui.elicit("Please confirm", CONFIRM_SCHEMA), "ok")
        return _text(f"state-ok: confirmed={json.dumps(ok)}")

    def irr_multi_round(tool_call_id, params, on_update, ctx, signal):
        name = answered(api.ui.elicit("Step 1: What is your name?", NAME_SCHEMA), "name")
        color = answered(api.ui.elicit("Step 2: What is your favorite color?", COLOR_SCHEMA), "color")
        return _text(f"Hello, {name}! Your favorite color is {color}.")

    def irr_tampered_state(tool_call_id, params, on_update, ctx, signal):
        # Rejecting a requestState the client altered is the server's check (it signs the state).
        ok = answered(api.ui.elicit("Please confirm", CONFIRM_SCHEMA), "ok")
        return _text(f"Confirmed: {json.dumps(ok)}")

    def irr_capabilities(tool_call_id, params, on_update, ctx, signal):
        # Asks only what the client can answer: `api.sample` is None for a client without
        # sampling, and then the question goes to the user instead.
        answer = api.sample("What is the capital of France?", max_tokens=50)
        if answer is not None:
            return _text(f"Sampled: {sampled_text(answer)}")
        name = answered(api.ui.elicit("What is your name?", NAME_SCHEMA), "name")
        return _text(f"Elicited: {name}")

    def missing_capability(tool_call_id, params, on_update, ctx, signal):
        # Needs sampling: a client that did not declare it must get -32021 from the server.
        answer = api.sample("Say hello", max_tokens=20)
        if answer is None:
            return _text("Sampling not available: the client offers no sampling")
        return _text(f"Sampled: {sampled_text(answer)}")

    def streaming_elicitation(tool_call_id, params, on_update, ctx, signal):
        # Its question must reach the client as an InputRequiredResult on the call's own stream,
        # never as an independent elicitation/create request.
        name = answered(api.ui.elicit("What is your name?", NAME_SCHEMA), "name")
        return _text(f"Hello, {name}!" if name is not None else "No name given")

    def logging_tool(tool_call_id, params, on_update, ctx, signal):
        # Logs; a request without a log level in its _meta must get no notifications/message.
        api.logger.info("test_logging_tool: started")
        api.logger.info("test_logging_tool: done")
        return _text("Logged two records")

    # --- 2026-07-28: the tasks extension (tasks-*, SEP-2663) ---------------------------------------

    def greet(tool_call_id, params, on_update, ctx, signal):
        return _text(f"Hello, {params['name']}!")

    def slow_compute(tool_call_id, params, on_update, ctx, signal):
        # Works `seconds`, and stops as soon as the call is cancelled (a cancelled task).
        seconds = float(params.get("seconds", 0))
        if seconds > 0 and signal.wait(seconds):
            signal.throw_if_aborted()
        return _text(f"Computed {params.get('label', 'result')} in {seconds:g} s")

    def failing_job(tool_call_id, params, on_update, ctx, signal):
        # A tool execution error after about a second (a task `completed` with isError).
        if signal.wait(1.0):
            signal.throw_if_aborted()
        raise RuntimeError("failing_job failed, as it always does")

    def confirm_delete(tool_call_id, params, on_update, ctx, signal):
        filename = params["filename"]
        confirm = answered(api.ui.elicit(f"Delete {filename}?", DELETE_SCHEMA), "confirm")
        return _text(f"Deleted {filename}" if confirm else f"Kept {filename}")

    async def multi_input(tool_call_id, params, on_update, ctx, signal):
        # Two questions at once, so that two input requests are pending together.
        first, second = await asyncio.gather(
            api.ui.elicit("First: what is your name?", NAME_SCHEMA),
            api.ui.elicit("Second: what is your favorite color?", COLOR_SCHEMA),
        )
        return _text(f"name={answered(first, 'name')}, color={answered(second, 'color')}")

    def tool_with_task(tool_call_id, params, on_update, ctx, signal):
        # Asks for a name, then works long enough to be a task; the result carries the name.
        name = answered(api.ui.elicit("What is your name?", NAME_SCHEMA), "name")
        if signal.wait(0.5):
            signal.throw_if_aborted()
        return _text(f"Hello, {name}! (from a task)")

    def custom_header(tool_call_id, params, on_update, ctx, signal):
        # Its `region` travels in the Mcp-Param-Region header too; the server checks that the two agree.
        return _text(f"Region: {params['region']}")

    def protocol_error_job(tool_call_id, params, on_update, ctx, signal):
        # The worker process dies mid-call: not the tool's error but the server side's (a task `failed`).
        os._exit(70)

    def tool(name, description, execute, parameters=NO_ARGS, **options):
        return api.pi.CustomTool(name=name, description=description, parameters=parameters, execute=execute, **options)

    return [
        tool("test_simple_text", "Tests simple text content response", simple_text),
        tool("test_image_content", "Tests image content response", image),
        tool("test_audio_content", "Tests audio content response", audio),
        tool("test_embedded_resource", "Tests embedded resource content response", embedded_resource),
        tool(
            "test_multiple_content_types",
            "Tests response with multiple content types (text, image, resource)",
            multiple_content_types,
        ),
        tool("test_tool_with_logging", "Tests tool that emits log messages during execution", with_logging),
        tool("test_tool_with_progress", "Tests tool that reports progress notifications", with_progress),
        tool("test_error_handling", "Tests error response handling", error_handling),
        tool(
            "test_reconnection",
            "Tests SSE stream disconnection and client reconnection (SEP-1699)",
            reconnection,
        ),
        tool(
            "test_sampling",
            "Tests server-initiated sampling (LLM completion request)",
            sampling,
            {
                "type": "object",
                "properties": {"prompt": {"type": "string", "description": "The prompt to send to the LLM"}},
                "required": ["prompt"],
            },
        ),
        tool(
            "test_elicitation",
            "Tests server-initiated elicitation (user input request)",
            elicitation,
            {
                "type": "object",
                "properties": {"message": {"type": "string", "description": "The message to show the user"}},
                "required": ["message"],
            },
        ),
        tool(
            "test_elicitation_sep1034_defaults",
            "Tests elicitation with default values per SEP-1034",
            elicitation_defaults,
        ),
        tool(
            "test_elicitation_sep1330_enums",
            "Tests elicitation with enum schema improvements per SEP-1330",
            elicitation_enums,
        ),
        tool(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)",
            json_schema_2020_12,
            JSON_SCHEMA_2020_12,
        ),
        # 2026-07-28
        tool(
            "test_input_required_result_elicitation",
            "Asks the user's name (an elicitation input request), then greets them (SEP-2322)",
            irr_elicitation,
        ),
        tool(
            "test_input_required_result_list_roots",
            "Asks the client for its roots (a roots/list input request), then names them (SEP-2322)",
            irr_list_roots,
        ),
        tool(
            "test_input_required_result_multiple_inputs",
            "Asks a name, a greeting and the roots at once: three input requests (SEP-2322)",
            irr_multiple_inputs,
        ),
        tool(
            "test_input_required_result_sampling",
            "Asks the client's model for the capital of France (a sampling input request) (SEP-2322)",
            irr_sampling,
        ),
        tool(
            "test_input_required_result_request_state",
            "Asks for a confirmation; the answer comes back with the server's requestState (SEP-2322)",
            irr_request_state,
        ),
        tool(
            "test_input_required_result_multi_round",
            "Asks two questions one after the other: a name, then a favorite color (SEP-2322)",
            irr_multi_round,
        ),
        tool(
            "test_input_required_result_tampered_state",
            "Asks for a confirmation; a tampered requestState must be refused (SEP-2322)",
            irr_tampered_state,
        ),
        tool(
            "test_input_required_result_capabilities",
            "Asks by sampling when the client can sample, else by elicitation (SEP-2322)",
            irr_capabilities,
        ),
        tool(
            "test_missing_capability",
            "Needs the client's sampling capability (SEP-2575)",
            missing_capability,
        ),
        tool(
            "test_streaming_elicitation",
            "Asks the user's name during the call (SEP-2575)",
            streaming_elicitation,
        ),
        tool("test_logging_tool", "Logs two records during the call (SEP-2575)", logging_tool),
        tool("greet", "Returns Hello, {name}!", greet, GREET_PARAMS),
        tool(
            "test_custom_header",
            "Names a region, which travels in the Mcp-Param-Region header as well (SEP-2243)",
            custom_header,
            REGION_PARAMS,
        ),
        tool(
            "slow_compute",
            "Works for `seconds` seconds, then returns a result",
            slow_compute,
            SLOW_COMPUTE_PARAMS,
            task_support="optional",
        ),
        tool("failing_job", "Fails with a tool error after about a second", failing_job, task_support="required"),
        tool(
            "protocol_error_job",
            "Its worker dies mid-call (a failed task)",
            protocol_error_job,
            task_support="optional",
        ),
        tool(
            "confirm_delete",
            "Asks for a confirmation, then deletes the file",
            confirm_delete,
            FILENAME_PARAMS,
            task_support="optional",
        ),
        tool("multi_input", "Asks two questions at once", multi_input, task_support="optional"),
        tool(
            "test_tool_with_task",
            "Asks for a name, then works as a task; the result carries the name",
            tool_with_task,
            task_support="required",
            task_after_input=True,
        ),
    ]
