"""A target's KV limits for predictions: from the profile's [engine] section, or discovered from the target.

Discovery reads what engines publish: the simulated engine's /sim/config, vLLM's `vllm:cache_config_info`
labels (block_size, num_gpu_blocks) with /v1/models' max_model_len, and TensorRT-LLM's JSON /metrics
(kvCacheStats maxNumBlocks, tokensPerBlock).
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from loadrepro.config.capacity import (
    EngineLimits,
    KvConfig,
    bytes_per_token,
    capacity,
    index_width,
    parse_size,
)
from loadrepro.config.profile import EngineSpec
from loadrepro.errors import ProfileError
from loadrepro.load.transport import NoAnswer, Transport, get_json


def kv_config(spec: EngineSpec) -> KvConfig | None:
    bpt = spec.bytes_per_token or (bytes_per_token(spec.layers, spec.kv_heads, spec.head_dim, spec.kv_dtype)
                                   if spec.layers and spec.kv_heads and spec.head_dim else None)
    if bpt is None or spec.tokens_per_block is None or spec.max_seq_len is None:
        return None
    if spec.pool_bytes is not None:
        pool = parse_size(spec.pool_bytes)
    elif spec.pool_blocks is not None:
        pool = spec.pool_blocks * spec.tokens_per_block * bpt
    elif spec.gpu_memory_bytes is not None:
        pool = int(parse_size(spec.gpu_memory_bytes) * spec.free_fraction) - parse_size(spec.weights_bytes)
    else:
        return None
    if pool <= 0:
        raise ProfileError("engine: the KV pool comes out empty (GPU memory x free fraction - weights <= 0)")
    draft = parse_size(spec.draft_pool_bytes) if spec.draft_pool_bytes is not None else None
    return KvConfig(bpt, spec.tokens_per_block, pool, spec.max_seq_len, spec.max_batch, spec.beam_width,
                    spec.draft_bytes_per_token, draft)


def from_profile(spec: EngineSpec) -> EngineLimits | None:
    kv = kv_config(spec)
    if kv is None:
        return None
    cap = capacity(kv)
    index = None
    if spec.index_pool_bytes is not None:
        index = index_width(min(kv.max_seq_len, parse_size(spec.index_pool_bytes) // kv.bytes_per_token),
                            kv.tokens_per_block)
    return EngineLimits("profile [engine]", kv.tokens_per_block, cap.pool_blocks, kv.max_seq_len, kv.beam_width,
                        cap.draft_pool_tokens, index)


async def longest_sequence(http: Transport, spec: EngineSpec) -> tuple[int, str] | None:
    """The longest sequence the target takes, and where that was read: the profile's [engine] max_seq_len, the
    max_model_len of /v1/models (vLLM, SGLang), or the per-slot n_ctx of llama.cpp's /props; None when it
    publishes none."""
    if spec.max_seq_len is not None:
        return spec.max_seq_len, "[engine] max_seq_len"
    models = await get_json(http, "/v1/models", 5)
    if isinstance(models, dict) and models.get("data") and isinstance(models["data"], list):
        length = models["data"][0].get("max_model_len") if isinstance(models["data"][0], dict) else None
        if isinstance(length, int) and length > 0:
            return length, "max_model_len in /v1/models"
    props = await get_json(http, "/props", 5)
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    if isinstance(n_ctx, int) and n_ctx > 0:
        return n_ctx, "n_ctx per slot in llama.cpp's /props"
    return None


async def discover(http: Transport) -> EngineLimits | None:
    sim = await get_json(http, "/sim/config", 5)
    if isinstance(sim, dict) and "primary_blocks" in sim:
        draft = sim["draft_blocks"] * sim["block_size"] if sim.get("draft_blocks") else None
        return EngineLimits("simulated engine /sim/config", sim["block_size"], sim["primary_blocks"],
                            sim["max_model_len"], sim["beam_width"], draft, sim.get("page_index_entries"))
    models = await get_json(http, "/v1/models", 5)
    max_len = None
    if isinstance(models, dict) and models.get("data"):
        max_len = models["data"][0].get("max_model_len")
    response = await http.get("/metrics", 5)
    if isinstance(response, NoAnswer) or response.status != 200 or max_len is None:
        return None
    if response.text.lstrip().startswith("["):  # TensorRT-LLM's iteration stats
        try:
            stats = response.json()[-1]["kvCacheStats"]
            return EngineLimits("TensorRT-LLM /metrics kvCacheStats", int(stats["tokensPerBlock"]),
                                int(stats["maxNumBlocks"]), int(max_len))
        except (ValueError, LookupError, TypeError):
            return None
    try:
        for family in text_string_to_metric_families(response.text):
            if family.name == "vllm:cache_config_info":
                labels = family.samples[0].labels
                return EngineLimits("vLLM vllm:cache_config_info", int(labels["block_size"]),
                                    int(labels["num_gpu_blocks"]), int(max_len))
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return None
