"""An OpenAI Agents SDK ``Agent`` whose conversation lives in snapstore (no network).

A scripted fake model (a ``Model`` subclass returning canned responses) stands in for the LLM:
on the first turn it calls a ``get_weather`` tool, then answers; on the second turn it answers
from the history. The session is a :class:`snapstore.integrations.openai_agents.SnapstoreSession`
on a local directory (or an ``s3://`` URL). A second ``SnapstoreSession`` object, as a process on
another machine would, reads the same history; a branch retries the second turn.

Run: ``python examples/openai_agents_session.py [REPO_DIR_OR_URL]`` (needs ``snapstore[openai]``).
Prints the history and a last line ``ok <items> items, branch retry: <items> items``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile

from agents import Agent, Model, ModelResponse, ModelSettings, Runner, Usage, function_tool, set_tracing_disabled
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from snapstore.integrations.openai_agents import SnapstoreSession  # noqa: E402


def _text(t: str, n: int) -> ResponseOutputMessage:
    return ResponseOutputMessage(id=f"msg_{n}", type="message", role="assistant", status="completed",
                                 content=[ResponseOutputText(type="output_text", text=t, annotations=[])])


class ScriptedModel(Model):
    """Returns the next canned response on each call; records the input each call received."""

    def __init__(self, script: list[list]):
        self.script = list(script)
        self.inputs: list = []

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                           tracing, *, previous_response_id=None, conversation_id=None, prompt=None,
                           **kwargs) -> ModelResponse:
        self.inputs.append(input if isinstance(input, str) else list(input))
        output = self.script.pop(0)
        return ModelResponse(output=output, usage=Usage(requests=1, input_tokens=100, output_tokens=20,
                                                        total_tokens=120), response_id=None)

    def stream_response(self, *a, **k):  # pragma: no cover - the example does not stream
        raise NotImplementedError("ScriptedModel does not stream")


@function_tool
def get_weather(city: str) -> str:
    """Return the weather of a city."""
    return f"Sunny, 21 C in {city}"


def script() -> list[list]:
    return [
        [ResponseFunctionToolCall(id="fc_1", call_id="call_1", type="function_call", name="get_weather",
                                  arguments='{"city": "Lisbon"}', status="completed")],
        [_text("It is sunny and 21 C in Lisbon.", 1)],
        [_text("You asked about Lisbon.", 2)],
        [_text("Lisbon, as before: sunny.", 3)],
    ]


async def main(location: str) -> tuple[list, list, ScriptedModel]:
    set_tracing_disabled(True)  # no trace export: nothing leaves the machine
    model = ScriptedModel(script())
    agent = Agent(name="weather", instructions="Answer weather questions.", model=model, tools=[get_weather],
                  model_settings=ModelSettings())
    session = SnapstoreSession("user-42", location)
    r1 = await Runner.run(agent, "What is the weather in Lisbon?", session=session)
    print("turn 1:", r1.final_output)
    # another object (another process or machine would do the same) continues the conversation
    other = SnapstoreSession("user-42", location)
    r2 = await Runner.run(agent, "Which city did I ask about?", session=other)
    print("turn 2:", r2.final_output)
    items = await other.get_items()
    for it in items:
        print(" ", it.get("role") or it.get("type"), str(it.get("content") or it.get("output") or
                                                          it.get("arguments"))[:70])
    # retry the second turn on a branch that shares the first turn's items
    n_first = items.index(next(i for i in items if i.get("content") == "Which city did I ask about?"))
    await other.create_branch("retry", keep_items=n_first)
    r3 = await Runner.run(agent, "Which city did I ask about? Be brief.", session=other)
    print("branch retry:", r3.final_output)
    branch_items = await other.get_items()
    session.close()
    other.close()
    return items, branch_items, model


if __name__ == "__main__":
    loc = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="snapstore-oa-")
    items, branch_items, _ = asyncio.run(main(loc))
    print(f"ok {len(items)} items, branch retry: {len(branch_items)} items")
