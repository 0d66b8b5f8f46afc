"""torch through the views (GPU machine; skipped where torch has no CUDA):
a peer's buffer written by a torch kernel and read by the peer, DLPack and
the CUDA Array Interface as torch consumes them."""
import pytest

import vmmipc
from conftest import NXT, PREV, RANK, all_true, pattern, write

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)


def test_torch_kernel_writes_a_peer_buffer(comm):
    n = 1 << 18
    torch.cuda.set_device(vmmipc.current_device())
    with vmmipc.alloc(n * 4) as buf, comm.allgather_map(buf) as win:
        stream = torch.cuda.current_stream()
        peer = torch.from_dlpack(win.mapping(NXT, dtype=torch.float32))
        assert peer.device == torch.device("cuda", vmmipc.current_device()) and peer.numel() == n
        peer.copy_(torch.arange(n, device="cuda", dtype=torch.float32) + RANK)   # kernels, into the peer
        win.barrier(stream=stream)
        mine = torch.from_dlpack(buf.mapping(dtype=torch.float32))
        ok = bool(torch.equal(mine, torch.arange(n, device="cuda", dtype=torch.float32) + PREV))
        win.barrier(stream=stream)
        torch.cuda.synchronize()
        del peer, mine
        assert all_true(ok)


def test_torch_cuda_array_interface_and_wrap(comm):
    n = 1 << 21                                                   # whole mappings: wrap needs them
    with vmmipc.alloc(n) as buf:
        write(buf.ptr, pattern(RANK, n))
        t = torch.as_tensor(buf.mapping(), device="cuda")       # __cuda_array_interface__
        assert t.data_ptr() == buf.ptr and t.dtype == torch.uint8 and t.numel() == n
        assert bytes(t[:64].cpu().tolist()) == pattern(RANK, 64)
        w = vmmipc.wrap(t)                                        # a torch tensor over VMM memory
        assert (w.ptr, w.size) == (buf.ptr, n)
        w.close()
        del t
    x = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")   # caching allocator: not VMM-exportable
    with pytest.raises(vmmipc.Error):
        vmmipc.wrap(x)
