"""The HyperPod elastic agent's own API code (1.1.3), for tests/pid1/hyperpod_agent.rs.

    python3 agent_api.py SRC status < BODY   re-encode a /status body with the agent's encoder
    python3 agent_api.py SRC start  < BODY   validate a /start body with the agent's StartRequest
    python3 agent_api.py SRC fault  < CASE   the reason and message of a firing log verdict
                                             ({"state": "HANGING", "rules": [[name, line], ...]})
                                             from the agent's own set_agent_state_fault

SRC is the package's src/ (scripts/setup-hyperpod.sh). Only server/util.py (the encoder, with
ipc/ and logagent/ for its enums) and server/api_models.py (pydantic) are loaded: the package's
__init__ files import torch, so the packages are registered as bare namespaces instead. For
`fault`, elastic_agent/hyperpod_elastic_agent.py (which imports torch) is not imported: the one
method `set_agent_state_fault` is taken from its syntax tree and run with the agent's own
LogState, on an object that answers the two getters it calls.
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
elif command == "fault":
    import ast
    import enum
    import io
    util = importlib.import_module("hyperpod_elastic_agent.server.util")
    path = os.path.join(src, "hyperpod_elastic_agent", "elastic_agent", "hyperpod_elastic_agent.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    method = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "set_agent_state_fault")
    # torch's WorkerState: only compared with (the run result here is never UNHEALTHY or FAILED).
    WorkerState = enum.Enum("WorkerState", "HEALTHY UNHEALTHY FAILED")
    scope = {"LogState": util.LogState, "AgentState": util.AgentState, "WorkerState": WorkerState, "io": io}
    exec(compile(ast.Module(body=[method], type_ignores=[]), path, "exec"), scope)
    case = json.loads(body)
    rule_name_log_line = {name: line for name, line in case["rules"]}

    class Agent:
        def get_run_result(self):
            return types.SimpleNamespace(state=WorkerState.HEALTHY, failures={})

        def get_log_agent_state(self):
            return util.LogState[case["state"]], rule_name_log_line

        def set_agent_state(self, state, reason=None, message=None):
            self.out = {"status": state.name.lower(), "reason": reason, "message": message}

    agent = Agent()
    scope["set_agent_state_fault"](agent)
    sys.stdout.buffer.write(json.dumps(agent.out, ensure_ascii=False).encode("utf-8"))
else:
    sys.exit(f"unknown command {command!r}: expected status, start or fault")
