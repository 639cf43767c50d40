/* rdma-core 65's new librdmacm calls, built against rdma-core 65's headers: a USER event
 * through rdma_write_cm_event, rdma_resolve_addrinfo and rdma_query_addrinfo on an
 * asynchronous and a synchronous id, and repoll over a pipe and rsockets. argv: an address of
 * the device and a free port. Prints "ok". */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: %s (errno %d)\n", __FILE__, __LINE__, #c, errno); exit(1); } } while (0)
#define FAILS(call, e) do { errno = 0; CHECK((call) == -1 && errno == (e)); } while (0)

static void user_events(struct rdma_event_channel *ch, struct rdma_cm_id *id)
{
	struct rdma_cm_event *ev;
	CHECK(rdma_write_cm_event(id, RDMA_CM_EVENT_USER, 7, 0x1234567890ULL) == 0);
	CHECK(rdma_get_cm_event(ch, &ev) == 0);
	CHECK(ev->event == RDMA_CM_EVENT_USER && ev->id == id && ev->status == 7);
	CHECK(ev->param.arg == 0x1234567890ULL);
	CHECK(strcmp(rdma_event_str(ev->event), "RDMA_CM_EVENT_USER") == 0);
	CHECK(rdma_ack_cm_event(ev) == 0);
	/* Only USER events are the program's to write. */
	FAILS(rdma_write_cm_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, 0), EINVAL);
}

static void check_found(struct rdma_cm_id *id, const char *ip, const char *port)
{
	struct rdma_addrinfo *ai;
	CHECK(rdma_query_addrinfo(id, &ai) == 0 && ai);
	char host[64], serv[16];
	CHECK(getnameinfo(ai->ai_dst_addr, ai->ai_dst_len, host, sizeof host, serv, sizeof serv,
			  NI_NUMERICHOST | NI_NUMERICSERV) == 0);
	CHECK(strcmp(host, ip) == 0 && strcmp(serv, port) == 0);
	rdma_freeaddrinfo(ai);
	/* Taken: nothing more to query. */
	FAILS(rdma_query_addrinfo(id, &ai), ENOENT);
}

static void addrinfo(struct rdma_event_channel *ch, struct rdma_cm_id *id, const char *ip,
		     const char *port)
{
	struct rdma_addrinfo hints = { .ai_flags = RAI_NUMERICHOST, .ai_port_space = RDMA_PS_TCP };
	struct rdma_addrinfo *ai;
	struct rdma_cm_event *ev;
	FAILS(rdma_query_addrinfo(id, &ai), ENOENT);
	CHECK(rdma_resolve_addrinfo(id, ip, port, &hints) == 0);
	FAILS(rdma_resolve_addrinfo(id, ip, port, &hints), EBUSY);
	CHECK(rdma_get_cm_event(ch, &ev) == 0);
	CHECK(ev->event == RDMA_CM_EVENT_ADDRINFO_RESOLVED && ev->status == 0 && ev->id == id);
	CHECK(rdma_ack_cm_event(ev) == 0);
	check_found(id, ip, port);
	/* No subnet administrator on RoCE. */
	struct rdma_addrinfo sa = { .ai_flags = RAI_SA };
	FAILS(rdma_resolve_addrinfo(id, NULL, port, &sa), ENOTSUP);
	FAILS(rdma_resolve_addrinfo(NULL, ip, port, &hints), EINVAL);

	/* A synchronous id: the call returns once its event is in. */
	struct rdma_cm_id *sync;
	CHECK(rdma_create_id(NULL, &sync, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addrinfo(sync, ip, port, &hints) == 0);
	check_found(sync, ip, port);
	/* One resolved and never queried is freed with its id. */
	CHECK(rdma_resolve_addrinfo(sync, ip, port, &hints) == 0);
	CHECK(rdma_destroy_id(sync) == 0);
}

/* The events repoll_wait reports within `ms`, expecting exactly `n`, the first with `data`. */
static void expect(int ep, int ms, int n, uint32_t events, uint64_t data)
{
	struct epoll_event out[4];
	int got = repoll_wait(ep, out, 4, ms);
	if (got != n)
		fprintf(stderr, "repoll_wait: %d events, expected %d\n", got, n);
	CHECK(got == n);
	if (n)
		CHECK((out[0].events & events) == events && out[0].data.u64 == data);
}

static void repoll(const char *ip, const char *port)
{
	int ep = repoll_create(EPOLL_CLOEXEC);
	CHECK(ep >= 0);
	int p[2];
	CHECK(pipe(p) == 0);
	struct epoll_event in = { .events = EPOLLIN, .data.u64 = 42 };
	CHECK(repoll_ctl(ep, EPOLL_CTL_ADD, p[0], &in) == 0);
	FAILS(repoll_ctl(ep, EPOLL_CTL_ADD, p[0], &in), EEXIST);
	expect(ep, 0, 0, 0, 0);
	CHECK(write(p[1], "x", 1) == 1);
	expect(ep, 1000, 1, EPOLLIN, 42);
	in.data.u64 = 43;
	CHECK(repoll_ctl(ep, EPOLL_CTL_MOD, p[0], &in) == 0);
	expect(ep, 1000, 1, EPOLLIN, 43);
	CHECK(repoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL) == 0);
	FAILS(repoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL), ENOENT);
	FAILS(repoll_ctl(p[0], EPOLL_CTL_ADD, p[1], &in), EBADF);
	struct epoll_event out;
	FAILS(repoll_wait(p[0], &out, 1, 0), EBADF);
	FAILS(repoll_wait(ep, &out, 0, 0), EINVAL);

	/* rsockets: a connection to accept, then data to read. */
	struct addrinfo h = { .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM };
	struct addrinfo *a;
	CHECK(getaddrinfo(ip, port, &h, &a) == 0);
	int l = rsocket(a->ai_family, SOCK_STREAM, 0);
	CHECK(l >= 0 && rbind(l, a->ai_addr, a->ai_addrlen) == 0 && rlisten(l, 1) == 0);
	struct epoll_event on = { .events = EPOLLIN, .data.u64 = 1 };
	CHECK(repoll_ctl(ep, EPOLL_CTL_ADD, l, &on) == 0);
	expect(ep, 0, 0, 0, 0);
	int c = rsocket(a->ai_family, SOCK_STREAM, 0);
	CHECK(c >= 0 && rconnect(c, a->ai_addr, a->ai_addrlen) == 0);
	expect(ep, 10000, 1, EPOLLIN, 1);
	int s = raccept(l, NULL, NULL);
	CHECK(s >= 0);
	on.data.u64 = 2;
	CHECK(repoll_ctl(ep, EPOLL_CTL_ADD, s, &on) == 0);
	CHECK(rsend(c, "hello", 5, 0) == 5);
	expect(ep, 10000, 1, EPOLLIN, 2);
	char buf[8];
	CHECK(rrecv(s, buf, sizeof buf, 0) == 5 && memcmp(buf, "hello", 5) == 0);
	CHECK(rclose(ep) == 0);
	FAILS(repoll_wait(ep, &out, 1, 0), EBADF);
	rclose(c);
	rclose(s);
	rclose(l);
	freeaddrinfo(a);
}

int main(int argc, char **argv)
{
	CHECK(argc == 3);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch);
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	user_events(ch, id);
	addrinfo(ch, id, argv[1], argv[2]);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
	repoll(argv[1], argv[2]);
	puts("ok");
	return 0;
}
