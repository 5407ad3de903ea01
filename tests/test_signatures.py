"""Each catalog entry is matched by a real engine message and not by a near miss."""

import pytest

from loadrepro.judge.signatures import CATALOG, compile_catalog, match, may_match

# (name, a real message as the engine prints it, a near miss that must not match that entry)
REAL = [
    ("trtllm-blocks-exhausted", "RuntimeError: [TensorRT-LLM][ERROR] Assertion failed: Available blocks exhausted",
     "Available blocks: 12"),
    ("trtllm-page-indices-too-short", "ValueError: User-provided base page indices is too short",
     "base page indices are long enough"),
    ("trtllm-history-exceeds-capacity", "History length cannot exceed capacity", "history length is fine"),
    ("trtllm-draft-resume-failed", "Failed to resume draft KV cache for request 53",
     "Failed to resume draft KV cache for request"),
    ("trtllm-draft-resize-failed",
     "Draft KV cache context resize failed for request 186: could not resize to 102991 tokens",
     "Draft KV cache context resize succeeded for request 186"),
    ("trtllm-executor-crashed", "Executor loop crashed on this rank; hard-killing all 4 ranks",
     "Executor loop started on this rank"),
    ("trtllm-hang-detected", "Hang detected on rank 3 in PyExecutor", "No hang on rank 3"),
    ("trtllm-broadcast-error", "Broadcasting event-loop error to 12 pending request(s)",
     "Broadcasting results to 12 pending request(s)"),
    ("trtllm-unavailable", "LLM is unavailable. Please check the server logs for more details.", "LLM is available"),
    ("trtllm-request-exceeds-capacity",
     "Request requires 3300 KV cache blocks to complete, which exceeds the total capacity of 3000 blocks",
     "Request requires 3300 KV cache blocks"),
    ("trtllm-exceeds-max-seq-len",
     "Input length (8000) + max new tokens (4096) + draft tokens (0) must be less than max sequence length (8192)",
     "max sequence length (8192)"),
    ("vllm-context-length", "This model's maximum context length is 16384 tokens. However, your prompt contains at "
     "least 16385 input tokens", "maximum context of 16384 tokens"),
    ("vllm-longer-than-max-model-len",
     "The decoder prompt (length 9000) is longer than the maximum model length of 8192",
     "is shorter than the maximum model length"),
    ("vllm-preempted", "Sequence group 7 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough "
     "KV cache space", "is preempted by nobody"),
    ("vllm-engine-dead", "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace",
     "EngineCore started"),
    ("vllm-no-cache-memory", "ValueError: No available memory for the cache blocks. Try increasing "
     "`gpu_memory_utilization`", "available memory for the cache blocks: 2 GiB"),
    ("sglang-retract", "KV cache pool is full. Retract requests. #retracted_reqs: 2", "KV cache pool is fine"),
    ("sglang-prefill-oom", "RuntimeError: Prefill out of memory. Try to lower your batch size.", "Prefill done"),
    ("sglang-exceeds-max-length", "The input (9000 tokens) exceeds the maximum allowed length (8192 tokens)",
     "within the maximum allowed length"),
    ("sglang-longer-than-context", "Requested token count is longer than the model's context length",
     "shorter than the model's context length"),
    ("llamacpp-exceeds-context", '{"error":{"code":400,"message":"the request exceeds the available context size, '
     'try increasing it","type":"exceed_context_size_error"}}', "the request fits the available context"),
    ("llamacpp-no-kv-slot", "decode: failed to find a memory slot for batch of size 512",
     "found a memory slot for batch"),
    ("llamacpp-context-exceeded", "Context size has been exceeded.", "Context size has been set"),
    ("llamacpp-input-truncated", "slot update_slots: id  0 | task 0 | input truncated, n_ctx = 2048, n_keep = 0, "
     "n_left = 2048, n_prompt_tokens = 1119", "slot update_slots: id  0 | task 0 | prompt done, n_past = 1119"),
    ("llamacpp-context-shift-disabled", "the request exceeds the available context size and context shift is disabled",
     "context shift is enabled"),
    # LiteLLM 1.108 with the engine behind it killed: HTTP 500, after its own retries
    ("gateway-upstream-connection", "litellm.InternalServerError: InternalServerError: OpenAIException - Connection "
     "error.\n\nLiteLLM: model group 'tiny' failed with the error above. No fallback was attempted.",
     "the connection error rate is shown on the dashboard"),
    ("proxy-no-healthy-upstream", "no healthy upstream", "healthy upstream chosen"),
    ("proxy-bad-gateway", "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1>"
     "</center><hr><center>nginx</center></body></html>", "the gateway answered 200"),
]


def test_every_catalog_entry_has_a_real_message():
    assert {name for name, _, _ in REAL} | {"page-index-exceeds-table", "vllm-max-tokens-too-large",
                                           "vllm-engine-busy"} == {s.name for s in CATALOG}


@pytest.mark.parametrize("name,real,near_miss", REAL)
def test_real_message_matches_and_near_miss_does_not(name, real, near_miss):
    by_name = {s.name: s for s in CATALOG}
    assert by_name[name].pattern.search(real)
    assert not by_name[name].pattern.search(near_miss)


def test_first_match_wins_and_profile_signatures_come_first():
    catalog = compile_catalog([("my-oom", r"CUDA out of memory", "F")])
    assert match("torch.OutOfMemoryError: CUDA out of memory. Tried", catalog).name == "my-oom"
    assert match("all good", catalog) is None
    # a context-shift message also says the context is exceeded: the more specific class-P entry names it
    assert match("the request exceeds the available context size and context shift is disabled").klass == "P"


@pytest.mark.parametrize("name,real,near_miss", REAL)
def test_the_large_log_prefilter_keeps_every_real_message(name, real, near_miss):
    assert may_match(real)
