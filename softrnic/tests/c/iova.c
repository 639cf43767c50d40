/* Memory regions named by an IOVA other than their address (ibv_reg_mr_iova): two RC QPs of
 * one device, connected to each other, WRITE and READ between two regions whose work requests
 * name them by their IOVAs. A WRITE that names the target's real address instead is a remote
 * access error. Prints "iova: ok", or what went wrong and exits 1. */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		fprintf(stderr, "iova: " __VA_ARGS__);                                             \
		fputc('\n', stderr);                                                               \
		exit(1);                                                                           \
	} while (0)

enum { SIZE = 4096, GID_INDEX = 1 };
static const uint64_t LOCAL_IOVA = 0x7000, REMOTE_IOVA = 0x100000000ull;

static struct ibv_cq *cq;

static void to_rts(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					 IBV_QP_ACCESS_FLAGS))
		FAIL("to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.sgid_index = GID_INDEX;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					 IBV_QP_MIN_RNR_TIMER))
		FAIL("to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					 IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		FAIL("to RTS");
}

/* Posts one RDMA operation and waits for its completion; its status. */
static enum ibv_wc_status rdma(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t local,
			       uint32_t len, uint32_t lkey, uint64_t remote, uint32_t rkey)
{
	struct ibv_sge sge = {.addr = local, .length = len, .lkey = lkey};
	struct ibv_send_wr wr = {
		.wr_id = 1,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = {.remote_addr = remote, .rkey = rkey},
	}, *bad;
	if (ibv_post_send(qp, &wr, &bad))
		FAIL("ibv_post_send");
	struct ibv_wc wc;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	if (n < 0)
		FAIL("ibv_poll_cq");
	return wc.status;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		FAIL("no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	if (!cq)
		FAIL("device, PD or CQ");
	struct ibv_qp_init_attr init = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *a = ibv_create_qp(pd, &init), *b = ibv_create_qp(pd, &init);
	union ibv_gid gid;
	if (!a || !b || ibv_query_gid(ctx, 1, GID_INDEX, &gid))
		FAIL("QPs or GID");
	to_rts(a, b->qp_num, &gid);
	to_rts(b, a->qp_num, &gid);

	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	unsigned char *local = calloc(1, SIZE), *remote = calloc(1, SIZE);
	struct ibv_mr *lmr = ibv_reg_mr_iova(pd, local, SIZE, LOCAL_IOVA, access);
	struct ibv_mr *rmr = ibv_reg_mr_iova(pd, remote, SIZE, REMOTE_IOVA, access);
	if (!lmr || !rmr)
		FAIL("ibv_reg_mr_iova");
	if (lmr->addr != local || rmr->addr != remote)
		FAIL("the MR's addr is not the buffer's");

	/* A WRITE from the local region's IOVA + 16 to the remote one's + 128. */
	for (int i = 0; i < SIZE; i++) {
		local[i] = (unsigned char)(i * 7 + 1);
		remote[i] = (unsigned char)(i * 3 + 2);
	}
	if (rdma(a, IBV_WR_RDMA_WRITE, LOCAL_IOVA + 16, 64, lmr->lkey, REMOTE_IOVA + 128,
		 rmr->rkey) != IBV_WC_SUCCESS)
		FAIL("WRITE by IOVA failed");
	if (memcmp(remote + 128, local + 16, 64))
		FAIL("WRITE landed elsewhere");
	/* A READ of the remote region's IOVA + 1024 into the local one's + 2048. */
	if (rdma(a, IBV_WR_RDMA_READ, LOCAL_IOVA + 2048, 32, lmr->lkey, REMOTE_IOVA + 1024,
		 rmr->rkey) != IBV_WC_SUCCESS)
		FAIL("READ by IOVA failed");
	if (memcmp(local + 2048, remote + 1024, 32))
		FAIL("READ came from elsewhere");
	/* The buffer's own address is no name of the remote region. */
	enum ibv_wc_status s = rdma(a, IBV_WR_RDMA_WRITE, LOCAL_IOVA, 8, lmr->lkey,
				    (uintptr_t)remote, rmr->rkey);
	if (s != IBV_WC_REM_ACCESS_ERR)
		FAIL("WRITE to the address: %s, want remote access error", ibv_wc_status_str(s));
	printf("iova: ok\n");
	return 0;
}
