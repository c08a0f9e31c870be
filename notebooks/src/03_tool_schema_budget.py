# %% [markdown]
# # The tool-schema budget
#
# Every tool the model can call is sent, as a JSON schema, with **every** request. Memory tools are paid for on
# every turn whether the model uses them or not. This notebook measures, with tiktoken (`o200k_base`) on the
# compact JSON the `openai` and `anthropic` SDKs send:
#
# 1. ironmem's built-in tools, the fence and the snapshot;
# 2. what the tools would cost if rule 1 were dropped and 1..5 external providers were stacked;
# 3. the memory tool kits of peer projects, measured from their real schemas where the package installs here and
#    transcribed from their source otherwise (each marked).

# %%
import json
from importlib.metadata import version
from pathlib import Path

import matplotlib.pyplot as plt

from ironmem import MemoryManager, ToolSchema
from ironmem.analysis.tokens import TokenCounter, TokenReport
from ironmem.core.config import provider_class

counter = TokenCounter("o200k_base")
print("token counts:", counter.method)  # offline without the encoding file: labelled estimates
import tempfile

manager = MemoryManager(home=tempfile.mkdtemp(prefix="ironmem-budget-"))
session = manager.start_session("budget")

# %% [markdown]
# ## 1. What ironmem itself adds to a request

# %%
report = TokenReport.for_session(session, counter)
print(f"fence overhead (tags + system note, no content): {report.fence_overhead} tokens")
print(f"empty snapshot: {report.snapshot} tokens")
for t in report.tools:
    print(f"tool {t.name:<15} OpenAI {t.openai:>4} tokens   Anthropic {t.anthropic:>4} tokens")
print(f"tools array as sent: OpenAI {report.tools_openai} tokens, Anthropic {report.tools_anthropic} tokens")

# A snapshot with both files at their character limits (2,200 + 1,375 chars of typical English notes):
note = "User prefers metric units and short answers; works on the tidepool API in Python 3.12."
filler_memory = [f"{i}. {note}" for i in range(1, 40)]
filler_user = [f"{i}. {note}" for i in range(1, 40)]
ops = []
used = {"memory": 0, "user": 0}
for target, entries, limit in (("memory", filler_memory, 2200), ("user", filler_user, 1375)):
    for e in entries:
        if used[target] + len(e) + 3 > limit:
            break
        used[target] += len(e) + 3
        ops.append({"action": "add", "target": target, "content": e})
assert json.loads(session.handle_tool_call("memory", {"operations": ops}))["success"]
full = manager.start_session("budget-full")
print(
    f"snapshot with both files near their limits ({len(full.system_prompt_block()):,} chars): "
    f"{counter.count(full.system_prompt_block())} tokens"
)

# %% [markdown]
# ## 2. If rule 1 were dropped
#
# ironmem's own external providers, measured from their real schemas, plus the peer kits of section 3 standing in
# for further providers (Hermes's memory tool last: in Hermes it is the built-in store, not a provider). Row *N* =
# the built-in tools plus the first *N* kits' tools.

# %%
own = {}
for name in ("mem0", "local_vector"):
    own[f"ironmem {name} provider"] = provider_class(name)().tool_schemas()


def kit_schemas(tools: list[dict], provider: str) -> list[ToolSchema]:
    return [ToolSchema(t["name"], t["description"], t["parameters"], provider=provider) for t in tools]


peer_data = json.loads(Path("data/peer_tool_schemas.json").read_text(encoding="utf-8"))
peer_kits = {}  # name -> (schemas, status, source)

try:
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langmem import create_manage_memory_tool, create_search_memory_tool

    langmem_tools = []
    for tool in (
        create_manage_memory_tool(namespace=("memories",)),
        create_search_memory_tool(namespace=("memories",)),
    ):
        fn = convert_to_openai_tool(tool)["function"]
        langmem_tools.append(
            ToolSchema(fn["name"], fn.get("description", ""), fn["parameters"], provider="langmem")
        )
    source = (
        f"langmem {version('langmem')} installed here; create_manage_memory_tool and "
        "create_search_memory_tool, via convert_to_openai_tool"
    )
    peer_kits["LangMem (manage + search)"] = (langmem_tools, "measured", source)
except ImportError:
    print("langmem is not installed: `pip install langmem` to measure its tools (skipped)")

for kit in peer_data["kits"]:
    peer_kits[kit["kit"]] = (kit_schemas(kit["tools"], kit["kit"]), kit["status"], kit["source"])

builtin = [s for s in session.tool_schemas() if s.provider == "builtin"]
# Provider-like kits first; Hermes's memory tool is its agent's built-in store, so it comes last (as a 5th kit).
order = sorted(peer_kits, key=lambda name: name.startswith("Hermes"))
stack = [*own.values(), *(peer_kits[name][0] for name in order)][:5]
stack_names = [*own, *order][:5]
what_if = TokenReport.for_session(session, counter, what_if=stack)
print(f"{'N':>2}  {'tools':>5}  {'OpenAI':>7}  {'Anthropic':>9}  rule 1    added provider")
for row, added in zip(what_if.what_if, ["(built-in only)", *stack_names]):
    verdict = "allowed" if row.allowed else "refused"
    print(
        f"{row.external_providers:>2}  {row.tools:>5}  {row.openai:>7,}  {row.anthropic:>9,}  {verdict:<8}  {added}"
    )

# What that costs: the extra tool tokens times 1,000 requests at gpt-4.1's input price ($2.00/MTok; $0.50 cached).
base = what_if.what_if[1].openai
for row in what_if.what_if[2:]:
    extra = row.openai - base
    print(
        f"N={row.external_providers}: +{extra:,} tokens per request over rule 1's maximum = "
        f"${extra * 1000 * 2.00 / 1e6:.2f} per 1,000 requests uncached, ${extra * 1000 * 0.50 / 1e6:.2f} cached"
    )

fig, ax = plt.subplots(figsize=(7, 3.5))
ns = [r.external_providers for r in what_if.what_if]
ax.bar(
    ns,
    [r.openai for r in what_if.what_if],
    color=["tab:green" if r.allowed else "tab:red" for r in what_if.what_if],
)
for r in what_if.what_if:
    ax.text(r.external_providers, r.openai + 20, f"{r.openai:,}\n({r.tools} tools)", ha="center", fontsize=8)
ax.set_xlabel("external providers beside the built-in one")
ax.set_ylabel("tool-schema tokens per request (OpenAI)")
ax.set_title("Rule 1 caps the memory tool budget (green: allowed)")
ax.set_ylim(0, max(r.openai for r in what_if.what_if) * 1.25)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 3. Peer memory tool kits
#
# Solid bars are measured from schemas produced by the installed package (or ironmem's own code); hatched bars are
# transcribed from the project's source at the commit given below, because the package does not ship the schema in
# an importable form here.

# %%
kits = {"ironmem built-in (memory + session_search)": (builtin, "measured", "ironmem (this repository)")}
for name, schemas in own.items():
    kits[f"{name} ({len(schemas)} tools)"] = (schemas, "measured", "ironmem (this repository)")
kits.update(peer_kits)

rows = []
for name, (schemas, status, source) in kits.items():
    rows.append(
        (
            name,
            len(schemas),
            counter.count_tools(schemas, "openai"),
            counter.count_tools(schemas, "anthropic"),
            status,
            source,
        )
    )
print(f"{'kit':<45} {'tools':>5} {'OpenAI':>7} {'Anthropic':>9}  status")
for name, n, o, a, status, _ in rows:
    print(f"{name:<45} {n:>5} {o:>7,} {a:>9,}  {status}")
print()
for name, *_, status, source in rows:
    print(f"- {name} [{status}]: {source}")

fig, ax = plt.subplots(figsize=(9, 3.8))
ys = range(len(rows))
bars = ax.barh(
    list(ys), [r[2] for r in rows], color=["tab:blue" if r[4] == "measured" else "tab:orange" for r in rows]
)
for bar, r in zip(bars, rows):
    if r[4] != "measured":
        bar.set_hatch("//")
    ax.text(bar.get_width() + 10, bar.get_y() + bar.get_height() / 2, f"{r[2]:,}", va="center", fontsize=8)
ax.set_yticks(list(ys), [f"{r[0]} [{r[4]}]" for r in rows], fontsize=8)
ax.invert_yaxis()
ax.set_xlabel("tokens per request (OpenAI function-tool format)")
ax.set_title("Memory tool kits: schema tokens sent with every request")
plt.tight_layout()
plt.show()

# %%
for s in (session, full):
    s.end()
manager.close()
