from loadrepro.sim.kvcache import BlockPool, block_hashes, blocks_for, clamped_seq_len, page_index_width


def test_block_hashes_chain_over_full_blocks_only():
    tokens = [f"t{i}" for i in range(10)]
    hashes = block_hashes(tokens, 4)
    assert len(hashes) == 2  # the last 2 tokens do not fill a block
    assert block_hashes(tokens[:8], 4) == hashes
    changed = ["x"] + tokens[1:]
    # A change in the first block changes every later hash: a block is keyed by its whole prefix.
    assert all(a != b for a, b in zip(block_hashes(changed, 4), hashes))


def test_capacity_arithmetic_of_the_page_index_table():
    bytes_per_token = 2 * 2 * 2 * 128 * 2  # layers x (K, V) x KV heads x head dim x 2 bytes
    assert bytes_per_token == 2048
    clamped = clamped_seq_len(4 << 20, bytes_per_token, max_model_len=8192)
    assert clamped == 2048
    assert page_index_width(clamped, 32) == 68  # ceil(2049 / 32) = 65, up to a multiple of 4
    assert blocks_for(8192, 32) == 256


def test_shared_prefix_is_found_and_reference_counted():
    pool = BlockPool(8)
    hashes = block_hashes([f"t{i}" for i in range(8)], 4)
    first = pool.allocate(2)
    for block, h in zip(first, hashes):
        pool.register(block, h)
    hits = pool.cached_prefix(hashes)
    assert hits == first
    pool.take_cached(hits)
    assert pool.num_used == 2  # shared, not copied
    pool.release(first)
    assert pool.num_used == 2  # the second owner still holds them
    pool.release(hits)
    assert pool.num_used == 0 and pool.num_cached_free == 2
    assert pool.cached_prefix(hashes) == first  # freed but still reusable


def test_eviction_takes_the_least_recently_freed_blocks_first():
    pool = BlockPool(4)
    a_hashes = block_hashes(list("abcdefgh"), 4)
    b_hashes = block_hashes(list("ijklmnop"), 4)
    a = pool.allocate(2)
    for block, h in zip(a, a_hashes):
        pool.register(block, h)
    b = pool.allocate(2)
    for block, h in zip(b, b_hashes):
        pool.register(block, h)
    pool.release(a)
    pool.release(b)
    assert pool.allocate(2) is not None
    assert pool.cached_prefix(a_hashes) == []
    assert pool.cached_prefix(b_hashes) == b


def test_allocation_that_does_not_fit_takes_nothing():
    pool = BlockPool(3)
    assert pool.allocate(4) is None
    assert pool.num_free == 3


def test_pool_without_reuse_never_reports_hits():
    pool = BlockPool(4, reuse=False)
    hashes = block_hashes(list("abcd"), 4)
    block = pool.allocate(1)
    pool.register(block[0], hashes[0])
    assert pool.cached_prefix(hashes) == []
