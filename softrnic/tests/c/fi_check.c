/* A libfabric ping-pong whose server binds the address it is given, as fi_pingpong (which
 * binds "localhost" for verbs) cannot: connected endpoints (-e msg, the verbs provider through
 * RDMA CM) or reliable datagrams (-e rdm, "verbs;ofi_rxm"), every size from 1 byte to 64 KiB,
 * each message's bytes checked on both sides.
 *
 *   server: fi_check -e msg|rdm -b ADDRESS -p PORT
 *   client: fi_check -e msg|rdm -p PORT SERVER_ADDRESS
 *
 * Prints "fi_check: N messages checked", or what went wrong and exits 1. */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		fprintf(stderr, "fi_check: " __VA_ARGS__);                                         \
		fputc('\n', stderr);                                                               \
		exit(1);                                                                           \
	} while (0)
#define CHECK(call)                                                                                \
	do {                                                                                       \
		int rc_ = (call);                                                                  \
		if (rc_)                                                                           \
			FAIL("%s: %s", #call, fi_strerror(-rc_));                                  \
	} while (0)

enum { MAX = 65536, NAME = 64 };

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_eq *eq;
static struct fid_cq *cq;
static struct fid_av *av;
static struct fid_ep *ep;
static struct fid_mr *mr;
static char *buf;
static fi_addr_t peer = FI_ADDR_UNSPEC;

/* Each operation's context (FI_CONTEXT mode), and whether it completed. */
static struct fi_context send_ctx, recv_ctx;
static int sent, received;

/* Reads completions until `*done`: sends and receives may complete in either order. */
static void wait_for(int *done)
{
	while (!*done) {
		struct fi_cq_entry e;
		ssize_t n = fi_cq_read(cq, &e, 1);
		if (n == -FI_EAGAIN)
			continue;
		if (n < 0) {
			struct fi_cq_err_entry err = {0};
			fi_cq_readerr(cq, &err, 0);
			FAIL("completion error: %s", fi_strerror(err.err));
		}
		*(e.op_context == &send_ctx ? &sent : &received) = 1;
	}
	*done = 0;
}

static void post_recv(size_t len)
{
	ssize_t rc;
	while ((rc = fi_recv(ep, buf, len, fi_mr_desc(mr), FI_ADDR_UNSPEC, &recv_ctx)) ==
	       -FI_EAGAIN)
		fi_cq_read(cq, NULL, 0);
	if (rc)
		FAIL("fi_recv: %s", fi_strerror(-rc));
}

static void send_and_wait(size_t len)
{
	ssize_t rc;
	while ((rc = fi_send(ep, buf, len, fi_mr_desc(mr), peer, &send_ctx)) == -FI_EAGAIN)
		fi_cq_read(cq, NULL, 0);
	if (rc)
		FAIL("fi_send: %s", fi_strerror(-rc));
	wait_for(&sent);
}

static void fill(size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (char)(i * 31 + seed);
}

static void check(size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		if (buf[i] != (char)(i * 31 + seed))
			FAIL("byte %zu of a %zu-byte message is wrong", i, len);
}

static void wait_event(uint32_t want)
{
	struct fi_eq_cm_entry entry;
	uint32_t event;
	ssize_t n = fi_eq_sread(eq, &event, &entry, sizeof(entry), 10000, 0);
	if (n < 0) {
		struct fi_eq_err_entry err = {0};
		fi_eq_readerr(eq, &err, 0);
		FAIL("event queue: %s", fi_strerror(err.err ? err.err : (int)-n));
	}
	if (event != want)
		FAIL("event %u, want %u", event, want);
	if (event == FI_CONNREQ) {
		/* The connection request's info makes the endpoint that accepts it. */
		CHECK(fi_domain(fabric, entry.info, &domain, NULL));
		CHECK(fi_endpoint(domain, entry.info, &ep, NULL));
		fi_freeinfo(entry.info);
	}
}

/* The endpoint's completion queue and memory, bound and enabled. */
static void ready(struct fi_info *info)
{
	struct fi_cq_attr ca = {.size = 16, .format = FI_CQ_FORMAT_CONTEXT};
	CHECK(fi_cq_open(domain, &ca, &cq, NULL));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	if (info->ep_attr->type == FI_EP_MSG) {
		CHECK(fi_ep_bind(ep, &eq->fid, 0));
	} else {
		struct fi_av_attr aa = {.type = FI_AV_MAP};
		CHECK(fi_av_open(domain, &aa, &av, NULL));
		CHECK(fi_ep_bind(ep, &av->fid, 0));
	}
	CHECK(fi_enable(ep));
	buf = aligned_alloc(4096, MAX);
	CHECK(fi_mr_reg(domain, buf, MAX, FI_SEND | FI_RECV, 0, 0, 0, &mr, NULL));
}

int main(int argc, char **argv)
{
	const char *type = "msg", *bind = NULL, *port = "47700";
	int opt;
	while ((opt = getopt(argc, argv, "e:b:p:")) != -1) {
		switch (opt) {
		case 'e': type = optarg; break;
		case 'b': bind = optarg; break;
		case 'p': port = optarg; break;
		default: FAIL("usage: fi_check -e msg|rdm [-b address] [-p port] [server]");
		}
	}
	const char *server = optind < argc ? argv[optind] : NULL;
	int msg = !strcmp(type, "msg");
	if (!msg && strcmp(type, "rdm"))
		FAIL("endpoint type %s: msg or rdm", type);
	if (!server && !bind)
		FAIL("the server needs -b ADDRESS");

	struct fi_info *hints = fi_allocinfo(), *info;
	hints->ep_attr->type = msg ? FI_EP_MSG : FI_EP_RDM;
	hints->caps = FI_MSG;
	hints->mode = FI_CONTEXT;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(msg ? "verbs" : "verbs;ofi_rxm");
	hints->addr_format = FI_SOCKADDR_IN;
	if (server)
		CHECK(fi_getinfo(FI_VERSION(1, 17), server, port, 0, hints, &info));
	else
		CHECK(fi_getinfo(FI_VERSION(1, 17), bind, port, FI_SOURCE, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	if (msg) {
		struct fi_eq_attr ea = {.wait_obj = FI_WAIT_UNSPEC};
		CHECK(fi_eq_open(fabric, &ea, &eq, NULL));
	}
	if (msg && !server) {
		struct fid_pep *pep;
		CHECK(fi_passive_ep(fabric, info, &pep, NULL));
		CHECK(fi_pep_bind(pep, &eq->fid, 0));
		CHECK(fi_listen(pep));
		wait_event(FI_CONNREQ);
		ready(info);
		post_recv(MAX);
		CHECK(fi_accept(ep, NULL, 0));
		wait_event(FI_CONNECTED);
	} else {
		CHECK(fi_domain(fabric, info, &domain, NULL));
		CHECK(fi_endpoint(domain, info, &ep, NULL));
		ready(info);
		post_recv(MAX);
		if (msg) {
			CHECK(fi_connect(ep, info->dest_addr, NULL, 0));
			wait_event(FI_CONNECTED);
		} else if (server) {
			/* RDM: the client tells the server its address in its first message. */
			if (fi_av_insert(av, info->dest_addr, 1, &peer, 0, NULL) != 1)
				FAIL("fi_av_insert of the server");
			size_t len = NAME;
			CHECK(fi_getname(&ep->fid, buf, &len));
			send_and_wait(len);
		} else {
			wait_for(&received);
			if (fi_av_insert(av, buf, 1, &peer, 0, NULL) != 1)
				FAIL("fi_av_insert of the client");
			post_recv(MAX);
		}
	}

	/* Every size from 1 byte to 64 KiB: the client sends, the server checks and answers. */
	int n = 0;
	for (size_t len = 1; len <= MAX; len *= 2) {
		for (int i = 0; i < 10; i++, n++) {
			unsigned seed = (unsigned)(len + i);
			if (server) {
				fill(len, seed);
				send_and_wait(len);
				wait_for(&received);
				check(len, seed + 1);
				post_recv(MAX);
			} else {
				wait_for(&received);
				check(len, seed);
				post_recv(MAX);
				fill(len, seed + 1);
				send_and_wait(len);
			}
		}
	}
	/* Each side's last receive stays posted; closing flushes it. */
	printf("fi_check: %d messages checked\n", 2 * n);
	return 0;
}
