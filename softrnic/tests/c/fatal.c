/* The device goes away under a running program (its daemon is killed), as a C program sees
 * it: IBV_EVENT_DEVICE_FATAL on async_fd, then EIO from every verb that needs the device,
 * while the destroys succeed so the program can clean up; no verb hangs (an alarm fails the
 * program if one does). The program prints "ready" and waits for a line on stdin, which the
 * test sends once the daemon is dead. Prints "ok". */
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: %s (errno %d)\n", __FILE__, __LINE__, #c, errno); exit(1); } } while (0)

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n > 0);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(pd && ch);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, ch, 0);
	CHECK(cq);
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr);
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	CHECK(qp);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	CHECK(!ibv_req_notify_cq(cq, 0));

	printf("ready\n");
	fflush(stdout);
	char line[16];
	CHECK(fgets(line, sizeof line, stdin));
	alarm(20);

	/* The daemon died asleep: the first post wakes it, finds it gone and fails (it must not
	 * kill the program with SIGPIPE). */
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad = NULL;
	CHECK(ibv_post_recv(qp, &rwr, &bad) == EIO && bad == &rwr);

	/* The event comes, to a program waiting for it with poll(2). */
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	CHECK(poll(&p, 1, 10000) == 1);
	struct ibv_async_event ev;
	CHECK(!ibv_get_async_event(ctx, &ev));
	CHECK(ev.event_type == IBV_EVENT_DEVICE_FATAL);
	ibv_ack_async_event(&ev);
	CHECK(ibv_get_async_event(ctx, &ev) == -1 && errno == EIO);

	/* A program spinning on its CQ is told. */
	struct ibv_wc wc;
	int polled;
	while ((polled = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	CHECK(polled < 0);

	/* Posts and control verbs fail with EIO. */
	CHECK(ibv_post_recv(qp, &rwr, &bad) == EIO);
	CHECK(ibv_req_notify_cq(cq, 0) == EIO);
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EIO);
	CHECK(!ibv_alloc_pd(ctx) && errno == EIO);

	/* A program blocked on its completion channel wakes with an error. */
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EIO);

	/* Everything can be destroyed. */
	CHECK(!ibv_destroy_qp(qp));
	CHECK(!ibv_dereg_mr(mr));
	CHECK(!ibv_destroy_cq(cq));
	CHECK(!ibv_destroy_comp_channel(ch));
	CHECK(!ibv_dealloc_pd(pd));
	CHECK(!ibv_close_device(ctx));
	ibv_free_device_list(list);
	printf("ok\n");
	return 0;
}
