/* Two RC QPs of one device connected to each other, and one RDMA operation at a time between
 * them, for the test programs that need a loopback pair. Define PROGRAM (the name errors start
 * with) before including this. */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		fprintf(stderr, PROGRAM ": " __VA_ARGS__);                                         \
		fputc('\n', stderr);                                                               \
		exit(1);                                                                           \
	} while (0)

enum { GID_INDEX = 1 };

static struct ibv_cq *cq;

/* Takes `qp` to RTS, connected to QP `dest` at `gid`, its peers allowed `access`. */
static inline void to_rts(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid, int access)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = access,
	};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					 IBV_QP_ACCESS_FLAGS))
		FAIL("to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 2;
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
	a.max_rd_atomic = 2;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					 IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		FAIL("to RTS");
}

/* Posts one RDMA operation and waits for its completion; its status. */
static inline enum ibv_wc_status rdma(struct ibv_qp *qp, enum ibv_wr_opcode op,
				      uint64_t local, uint32_t len, uint32_t lkey,
				      uint64_t remote, uint32_t rkey)
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
	/* A completion comes, in error if need be: one that never does is a failure. */
	struct ibv_wc wc;
	int n;
	time_t deadline = time(NULL) + 60;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		if (time(NULL) > deadline)
			FAIL("no completion in 60 s");
	if (n < 0)
		FAIL("ibv_poll_cq");
	return wc.status;
}

/* What an RC QP of these programs is made with. */
static inline struct ibv_qp_init_attr rc_init(struct ibv_cq *cq)
{
	struct ibv_qp_init_attr init = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
	};
	return init;
}

/* A PD, a CQ and two RC QPs on the first device, connected to each other. */
static inline struct ibv_pd *loopback(struct ibv_qp **a, struct ibv_qp **b)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		FAIL("no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	if (!cq)
		FAIL("device, PD or CQ");
	struct ibv_qp_init_attr init = rc_init(cq);
	*a = ibv_create_qp(pd, &init);
	*b = ibv_create_qp(pd, &init);
	union ibv_gid gid;
	if (!*a || !*b || ibv_query_gid(ctx, 1, GID_INDEX, &gid))
		FAIL("QPs or GID");
	int access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	to_rts(*a, (*b)->qp_num, &gid, access);
	to_rts(*b, (*a)->qp_num, &gid, access);
	return pd;
}
