/* ATOMIC WRITE and FLUSH (IBA 1.5) through the extended send API: two RC QPs of one device,
 * connected to each other. ibv_wr_atomic_write stores its 8 bytes; ibv_wr_flush (rdma-core 45,
 * reached where a program built against rdma-core 45 or later finds it) completes for a range
 * and for a whole region; a persistent flush of a region that cannot be persistent, and a
 * misaligned ATOMIC WRITE, fail as IBA says. Prints "atomic_write_flush: ok", or what went wrong
 * and exits 1. */
#define PROGRAM "atomic_write_flush"
#include "loopback.h"
#include <errno.h>

/* What rdma-core 45 added to <infiniband/verbs.h>; Debian 12's rdma-core 44 lacks it. */
enum {
	ACCESS_FLUSH_GLOBAL = 1 << 8,
	ACCESS_FLUSH_PERSISTENT = 1 << 9,
	QP_EX_WITH_FLUSH = 1 << 11,
	WC_FLUSH = 8,
	FLUSH_GLOBAL = 1,
	FLUSH_PERSISTENT = 2,
	FLUSH_RANGE = 0,
	FLUSH_MR = 1,
};
struct qp_ex_45 {
	struct ibv_qp_ex ex;
	void (*wr_flush)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, size_t len,
			 uint8_t type, uint8_t level);
};
/* The kernel's IB_UVERBS_DEVICE_* bits in device_cap_flags_ex (Linux 6.2). */
static const uint64_t CAP_FLUSH_GLOBAL = 1ull << 38, CAP_FLUSH_PERSISTENT = 1ull << 39,
		      CAP_ATOMIC_WRITE = 1ull << 40;

enum { SIZE = 4096 };

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;

/* Two RC QPs connected to each other; returns the requester. */
static struct ibv_qp *pair(void)
{
	struct ibv_qp_init_attr_ex init = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = {.max_send_wr = 8, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE | QP_EX_WITH_FLUSH,
	};
	struct ibv_qp *a = ibv_create_qp_ex(ctx, &init), *b = ibv_create_qp_ex(ctx, &init);
	if (!a || !b)
		FAIL("ibv_create_qp_ex: %s", strerror(errno));
	int access = IBV_ACCESS_REMOTE_WRITE | ACCESS_FLUSH_GLOBAL | ACCESS_FLUSH_PERSISTENT;
	to_rts(a, b->qp_num, &gid, access);
	to_rts(b, a->qp_num, &gid, access);
	return a;
}

/* Waits for one completion, which must be wr_id `id` with `opcode` on success. */
static enum ibv_wc_status wait(uint64_t id, enum ibv_wc_opcode opcode)
{
	struct ibv_wc wc;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	if (n < 0 || wc.wr_id != id)
		FAIL("completion %llu, want %llu", (unsigned long long)wc.wr_id,
		     (unsigned long long)id);
	if (wc.status == IBV_WC_SUCCESS && wc.opcode != opcode)
		FAIL("completion %llu has opcode %d, want %d", (unsigned long long)id, wc.opcode,
		     opcode);
	return wc.status;
}

static enum ibv_wc_status atomic_write(struct ibv_qp *qp, uint32_t rkey, uint64_t to,
				       const char value[8])
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	ibv_wr_start(x);
	x->wr_id = 1;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(x, rkey, to, value);
	if (ibv_wr_complete(x))
		FAIL("ibv_wr_complete (ATOMIC WRITE)");
	return wait(1, IBV_WC_ATOMIC_WRITE);
}

static enum ibv_wc_status flush(struct ibv_qp *qp, uint32_t rkey, uint64_t at, size_t len,
				uint8_t type, uint8_t level)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	ibv_wr_start(x);
	x->wr_id = 2;
	x->wr_flags = IBV_SEND_SIGNALED;
	((struct qp_ex_45 *)x)->wr_flush(x, rkey, at, len, type, level);
	if (ibv_wr_complete(x))
		FAIL("ibv_wr_complete (FLUSH)");
	return wait(2, (enum ibv_wc_opcode)WC_FLUSH);
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		FAIL("no device");
	ctx = ibv_open_device(list[0]);
	pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	if (!cq || ibv_query_gid(ctx, 1, GID_INDEX, &gid))
		FAIL("device, PD, CQ or GID");
	struct ibv_device_attr_ex dev;
	if (ibv_query_device_ex(ctx, NULL, &dev))
		FAIL("ibv_query_device_ex");
	uint64_t caps = dev.device_cap_flags_ex;
	if (!(caps & CAP_ATOMIC_WRITE) || !(caps & CAP_FLUSH_GLOBAL) || caps & CAP_FLUSH_PERSISTENT)
		FAIL("device_cap_flags_ex %#llx", (unsigned long long)caps);

	unsigned char *mem = calloc(1, SIZE);
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | ACCESS_FLUSH_GLOBAL;
	struct ibv_mr *mr = ibv_reg_mr(pd, mem, SIZE, access);
	if (!mr)
		FAIL("ibv_reg_mr: %s", strerror(errno));
	/* Ordinary memory is never persistent: rxe refuses such a region the same way. */
	if (ibv_reg_mr(pd, mem, SIZE, access | ACCESS_FLUSH_PERSISTENT) || errno != EINVAL)
		FAIL("a persistent-flush region was not refused with EINVAL");

	struct ibv_qp *qp = pair();
	uint64_t base = (uintptr_t)mem;
	if (atomic_write(qp, mr->rkey, base + 64, "8 bytes!") != IBV_WC_SUCCESS)
		FAIL("ATOMIC WRITE failed");
	if (memcmp(mem + 64, "8 bytes!", 8) || mem[63] || mem[72])
		FAIL("ATOMIC WRITE landed wrong");
	if (flush(qp, mr->rkey, base, SIZE, FLUSH_GLOBAL, FLUSH_RANGE) != IBV_WC_SUCCESS)
		FAIL("FLUSH of a range failed");
	/* A whole-region flush ignores the range. */
	if (flush(qp, mr->rkey, 0, 12345678, FLUSH_GLOBAL, FLUSH_MR) != IBV_WC_SUCCESS)
		FAIL("FLUSH of the region failed");
	/* An ATOMIC WRITE cannot be posted with ibv_post_send: nothing carries its value. */
	struct ibv_send_wr wr = {.opcode = IBV_WR_ATOMIC_WRITE, .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	if (ibv_post_send(qp, &wr, &bad) != EINVAL)
		FAIL("ibv_post_send(IBV_WR_ATOMIC_WRITE) was not EINVAL");

	enum ibv_wc_status s = flush(qp, mr->rkey, base, 8, FLUSH_PERSISTENT, FLUSH_RANGE);
	if (s != IBV_WC_REM_ACCESS_ERR)
		FAIL("persistent FLUSH: %s, want remote access error", ibv_wc_status_str(s));
	s = atomic_write(pair(), mr->rkey, base + 4, "misalign");
	if (s != IBV_WC_REM_INV_REQ_ERR)
		FAIL("misaligned ATOMIC WRITE: %s, want remote invalid request",
		     ibv_wc_status_str(s));
	printf("atomic_write_flush: ok\n");
	return 0;
}
