"""Scale through the verbs API (scripts/bench-programs runs it under `softrnic exec`): one
program creates N RC QPs with 16-entry queues on one PD and CQ, connects them in pairs on the
device, sends one 8-byte message over every pair, and prints the rates and the daemon's
memory per QP.

usage: bench-qps.py N DAEMON_PID
"""

import sys
import time

from pyverbs.addr import AHAttr, GlobalRoute
import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

BATCH = 1000


def rss_kib(pid):
    """The daemon's own memory (RssAnon) and the pages of shared regions it has touched
    (RssShmem: the rings, which the program maps too), in KiB."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return tuple(int(fields[k].split()[0]) for k in ("RssAnon", "RssShmem"))


def main():
    n, daemon = int(sys.argv[1]), int(sys.argv[2])
    assert n % 2 == 0 and n // 2 % BATCH == 0, "N: a multiple of 2000"
    ctx = d.Context(name=d.get_device_list()[0].name.decode())
    pd = PD(ctx)
    cq = CQ(ctx, 2 * BATCH)
    mr = MR(pd, 8 * BATCH, e.IBV_ACCESS_LOCAL_WRITE)
    cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)
    before = rss_kib(daemon)

    t = time.monotonic()
    qps = [QP(pd, init) for _ in range(n)]
    created = time.monotonic() - t
    after_create = rss_kib(daemon)

    gr = GlobalRoute(dgid=ctx.query_gid(1, 0), sgid_index=0)
    attr = QPAttr()
    attr.path_mtu = e.IBV_MTU_1024
    attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=gr)
    attr.min_rnr_timer = 12
    attr.timeout = 14
    attr.retry_cnt = 7
    attr.rnr_retry = 7
    half = n // 2
    t = time.monotonic()
    for i, qp in enumerate(qps):
        attr.dest_qp_num = qps[(i + half) % n].qp_num
        attr.rq_psn = attr.sq_psn = 0
        qp.to_rts(attr)
    connected = time.monotonic() - t

    t = time.monotonic()
    for start in range(0, half, BATCH):
        for k in range(BATCH):
            sge = SGE(mr.buf + 8 * k, 8, mr.lkey)
            qps[half + start + k].post_recv(RecvWR(wr_id=k, num_sge=1, sg=[sge]))
            qps[start + k].post_send(SendWR(wr_id=k, num_sge=1, sg=[sge]))
        done = 0
        while done < 2 * BATCH:
            got, wcs = cq.poll(2 * BATCH - done)
            for wc in wcs:
                if wc.status != e.IBV_WC_SUCCESS:
                    sys.exit(f"completion status {wc.status}")
            done += got
    carried = time.monotonic() - t
    loaded = rss_kib(daemon)

    print(f"qps {n}")
    print(f"create_per_s {n / created:.0f}")
    print(f"connect_per_s {n / connected:.0f}")
    print(f"messages_per_s {half / carried:.0f}")
    for name, at in [("created", after_create), ("loaded", loaded)]:
        own, rings = ((at[i] - before[i]) * 1024 / n for i in (0, 1))
        print(f"daemon_bytes_per_qp_{name} {own:.0f}")
        print(f"ring_bytes_per_qp_{name} {rings:.0f}")


main()
