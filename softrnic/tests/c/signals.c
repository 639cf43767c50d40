/* A signal during a blocking wait for an event, as the kernel's event files have it: with a
 * handler of no SA_RESTART, ibv_get_cq_event, ibv_get_async_event and rdma_get_cm_event end
 * with -1 and EINTR (qperf ends a test so); with SA_RESTART the wait goes on to its event.
 * Prints "ok". */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: %s (errno %d)\n", __FILE__, __LINE__, #c, errno); exit(1); } } while (0)

static atomic_int fired;

static void on_alarm(int sig)
{
	(void)sig;
	atomic_store(&fired, 1);
}

/* SIGALRM in 50 ms, its handler restarting system calls or not. */
static void alarm_soon(int flags)
{
	struct sigaction act = {.sa_handler = on_alarm, .sa_flags = flags};
	sigemptyset(&act.sa_mask);
	CHECK(!sigaction(SIGALRM, &act, NULL));
	atomic_store(&fired, 0);
	struct itimerval t = {.it_value = {.tv_usec = 50000}};
	CHECK(!setitimer(ITIMER_REAL, &t, NULL));
}

static struct ibv_qp *qp;

/* Once the signal has come, the QP goes to ERR: its posted receive completes, flushed. */
static void *flush_after_the_signal(void *unused)
{
	(void)unused;
	while (!atomic_load(&fired))
		usleep(1000);
	usleep(20000);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE));
	return NULL;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0]);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(pd && ch);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, ch, 0);
	CHECK(cq);
	struct ibv_qp_init_attr init = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
	};
	qp = ibv_create_qp(pd, &init);
	CHECK(qp);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					 IBV_QP_ACCESS_FLAGS));
	static char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr);
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = sizeof buf, .lkey = mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1}, *bad;
	CHECK(!ibv_post_recv(qp, &rwr, &bad));
	CHECK(!ibv_req_notify_cq(cq, 0));

	struct ibv_cq *ecq;
	void *ectx;
	alarm_soon(0);
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &ecq, &ectx) == -1 && errno == EINTR && atomic_load(&fired));

	struct ibv_async_event ev;
	alarm_soon(0);
	errno = 0;
	CHECK(ibv_get_async_event(ctx, &ev) == -1 && errno == EINTR && atomic_load(&fired));

	struct rdma_event_channel *cm = rdma_create_event_channel();
	CHECK(cm);
	struct rdma_cm_event *cm_ev;
	alarm_soon(0);
	errno = 0;
	CHECK(rdma_get_cm_event(cm, &cm_ev) == -1 && errno == EINTR && atomic_load(&fired));
	rdma_destroy_event_channel(cm);

	pthread_t t;
	CHECK(!pthread_create(&t, NULL, flush_after_the_signal, NULL));
	alarm_soon(SA_RESTART);
	CHECK(ibv_get_cq_event(ch, &ecq, &ectx) == 0 && ecq == cq && atomic_load(&fired));
	CHECK(!pthread_join(t, NULL));
	ibv_ack_cq_events(cq, 1);
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(cq, 1, &wc) == 1 && wc.wr_id == 7 && wc.status == IBV_WC_WR_FLUSH_ERR);

	CHECK(!ibv_destroy_qp(qp) && !ibv_dereg_mr(mr) && !ibv_destroy_cq(cq));
	CHECK(!ibv_destroy_comp_channel(ch) && !ibv_dealloc_pd(pd) && !ibv_close_device(ctx));
	ibv_free_device_list(list);
	printf("ok\n");
	return 0;
}
