/* Async events and completion channels through softrnic's libibverbs, as a C program sees
 * them: an SRQ limit event read after poll(2) on async_fd, and a completion notification read
 * after epoll on the channel's fd. Loopback: one RC QP pair on one device. Prints "ok". */
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c); exit(1); } } while (0)

static void connect_qp(struct ibv_qp *qp, uint32_t remote, union ibv_gid gid, int gid_index)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = remote;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC));
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n > 0);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx);
	int gid_index = 1;
	union ibv_gid gid;
	CHECK(!ibv_query_gid(ctx, 1, gid_index, &gid));
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(pd && ch);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, (void *)0x5eed, ch, 0);
	CHECK(cq && cq->cq_context == (void *)0x5eed);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(srq);
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(mr);
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *sender = ibv_create_qp(pd, &qa);
	qa.srq = srq;
	struct ibv_qp *receiver = ibv_create_qp(pd, &qa);
	CHECK(sender && receiver);
	connect_qp(sender, receiver->qp_num, gid, gid_index);
	connect_qp(receiver, sender->qp_num, gid, gid_index);

	/* Four receives on the SRQ, limit 4: the first SEND takes it below and fires the event. */
	for (int i = 0; i < 4; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf + 1024 * i, .length = 1024, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		CHECK(!ibv_post_srq_recv(srq, &wr, &bad));
	}
	struct ibv_srq_attr limit = { .srq_limit = 4 };
	CHECK(!ibv_modify_srq(srq, &limit, IBV_SRQ_LIMIT));
	CHECK(!ibv_req_notify_cq(cq, 0));

	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN };
	CHECK(!epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &ev));

	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED }, *bad;
	CHECK(!ibv_post_send(sender, &wr, &bad));

	/* The completion channel: readable through epoll, then one event for our CQ. */
	CHECK(epoll_wait(ep, &ev, 1, 10000) == 1);
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK(!ibv_get_cq_event(ch, &ev_cq, &ev_ctx));
	CHECK(ev_cq == cq && ev_ctx == (void *)0x5eed);
	ibv_ack_cq_events(cq, 1);

	/* The async event: poll(2) on async_fd, then SRQ_LIMIT_REACHED naming our SRQ. */
	struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };
	CHECK(poll(&pfd, 1, 10000) == 1);
	struct ibv_async_event ae;
	CHECK(!ibv_get_async_event(ctx, &ae));
	CHECK(ae.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ae.element.srq == srq);
	ibv_ack_async_event(&ae);
	struct ibv_srq_attr now;
	CHECK(!ibv_query_srq(srq, &now) && now.srq_limit == 0);

	/* Both completions arrive, in order per queue. */
	struct ibv_wc wc[4];
	int got = 0;
	for (int tries = 0; got < 2 && tries < 1000000; tries++)
		got += ibv_poll_cq(cq, 4 - got, wc + got);
	CHECK(got == 2);
	for (int i = 0; i < 2; i++)
		CHECK(wc[i].status == IBV_WC_SUCCESS);

	/* Bad input gets rxe's errno. */
	CHECK(ibv_destroy_cq(cq) == EBUSY);
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY);
	CHECK(ibv_dealloc_pd(pd) == EBUSY);

	CHECK(!ibv_destroy_qp(sender) && !ibv_destroy_qp(receiver) && !ibv_destroy_srq(srq));
	CHECK(!ibv_dereg_mr(mr) && !ibv_destroy_cq(cq) && !ibv_destroy_comp_channel(ch));
	CHECK(!ibv_dealloc_pd(pd) && !ibv_close_device(ctx));
	ibv_free_device_list(list);
	puts("ok");
	return 0;
}
