"""The HyperPod elastic agent's own API code (1.1.3), for tests/hyperpod_agent.rs.

    python3 agent_api.py SRC status < BODY   re-encode a /status body with the agent's encoder
    python3 agent_api.py SRC start  < BODY   validate a /start body with the agent's StartRequest

SRC is the package's src/ (scripts/setup-hyperpod.sh). Only server/util.py (the encoder, with
ipc/ and logagent/ for its enums) and server/api_models.py (pydantic) are loaded: the package's
__init__ files import torch, so the packages are registered as bare namespaces instead.
"""
import datetime
import importlib
import json
import os
import sys
import types

src, command = sys.argv[1], sys.argv[2]
for name, sub in [("hyperpod_elastic_agent", ""), ("hyperpod_elastic_agent.server", "server"),
                  ("hyperpod_elastic_agent.ipc", "ipc"), ("hyperpod_elastic_agent.logagent", "logagent")]:
    module = types.ModuleType(name)
    module.__path__ = [os.path.join(src, "hyperpod_elastic_agent", sub)]
    sys.modules[name] = module
body = sys.stdin.buffer.read().decode("utf-8")

if command == "status":
    util = importlib.import_module("hyperpod_elastic_agent.server.util")
    got = json.loads(body)
    for state, stamp in got["transitions"].items():
        parsed = datetime.datetime.fromisoformat(stamp)
        if parsed.utcoffset() != datetime.timedelta(0) or parsed.isoformat() != stamp:
            sys.exit(f"transition {state}: {stamp!r} is not datetime.now(timezone.utc).isoformat()")
    # What the agent's _api_status passes to its encoder, from the values rankvisor showed.
    response = util.StatusResponse(
        status=util.AgentState[got["status"].upper()],
        transitions={util.AgentState[k]: v for k, v in got["transitions"].items()},
        agent_version=got.get("agent_version"),
        reason=got.get("reason"),
        message=got.get("message"),
        ip_version=got.get("ipversion"),
        spare=got.get("spare"),
        restart_mode=got.get("restartMode"),
    )
    if "assigned_rank" in got:
        response.assigned_rank = got["assigned_rank"]
    text = json.dumps(response, ensure_ascii=False, allow_nan=False, indent=None,
                      separators=(",", ":"), cls=util.StatusResponseJSONEncoder)
    sys.stdout.buffer.write(text.encode("utf-8"))
elif command == "start":
    models = importlib.import_module("hyperpod_elastic_agent.server.api_models")
    import pydantic
    try:
        models.StartRequest.model_validate(json.loads(body))
        print(json.dumps({"detail": []}))
    except pydantic.ValidationError as e:
        # FastAPI reports a body model's errors under "body".
        detail = [{"type": err["type"], "loc": ["body", *err["loc"]], "msg": err["msg"]} for err in e.errors()]
        print(json.dumps({"detail": detail}))
else:
    sys.exit(f"unknown command {command!r}: expected status or start")
