/* XRC domains shared by file, and ibv_open_qp: two contexts of one device stand for two
 * programs. The first opens a domain with a file and makes an XRC SRQ and a target QP in it;
 * the second opens the same file's domain (O_EXCL refused, no O_CREAT on a file without one
 * refused), opens the target QP by number, moves it to INIT and queries it. The first cannot
 * close the domain while its objects live. Prints "xrc_domain: ok", or what went wrong and
 * exits 1. */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		fprintf(stderr, "xrc_domain: " __VA_ARGS__);                                       \
		fputc('\n', stderr);                                                               \
		exit(1);                                                                           \
	} while (0)

static struct ibv_xrcd *open_xrcd(struct ibv_context *ctx, int fd, int oflags)
{
	struct ibv_xrcd_init_attr a = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = fd,
		.oflags = oflags,
	};
	return ibv_open_xrcd(ctx, &a);
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		FAIL("no device");
	struct ibv_context *one = ibv_open_device(list[0]), *two = ibv_open_device(list[0]);
	if (!one || !two)
		FAIL("ibv_open_device");
	char path[] = "/tmp/xrc_domainXXXXXX", other[] = "/tmp/xrc_otherXXXXXX";
	int fd = mkstemp(path), fd2 = mkstemp(other);
	if (fd < 0 || fd2 < 0)
		FAIL("mkstemp");
	unlink(path);
	unlink(other);

	struct ibv_xrcd *x1 = open_xrcd(one, fd, O_CREAT);
	if (!x1)
		FAIL("ibv_open_xrcd: %s", strerror(errno));
	struct ibv_pd *pd = ibv_alloc_pd(one);
	struct ibv_cq *cq = ibv_create_cq(one, 4, NULL, NULL, 0);
	struct ibv_srq_init_attr_ex sa = {
		.attr = {.max_wr = 4, .max_sge = 1},
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
			     IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_XRC,
		.pd = pd,
		.xrcd = x1,
		.cq = cq,
	};
	struct ibv_srq *srq = pd && cq ? ibv_create_srq_ex(one, &sa) : NULL;
	uint32_t srqn;
	if (!srq || ibv_get_srq_num(srq, &srqn))
		FAIL("XRC SRQ: %s", strerror(errno));
	struct ibv_qp_init_attr_ex qa = {
		.qp_type = IBV_QPT_XRC_RECV,
		.comp_mask = IBV_QP_INIT_ATTR_XRCD,
		.xrcd = x1,
	};
	struct ibv_qp *tgt = ibv_create_qp_ex(one, &qa);
	if (!tgt)
		FAIL("XRC target QP: %s", strerror(errno));

	/* The second program: the same file's domain, by the kernel's rules. */
	if (open_xrcd(two, fd, O_CREAT | O_EXCL) || errno != EINVAL)
		FAIL("O_EXCL on a file with a domain was not EINVAL");
	if (open_xrcd(two, fd2, 0) || errno != EAGAIN)
		FAIL("no O_CREAT on a file without a domain was not EAGAIN");
	struct ibv_xrcd *x2 = open_xrcd(two, fd, 0);
	if (!x2)
		FAIL("ibv_open_xrcd of the shared file: %s", strerror(errno));
	struct ibv_qp_open_attr oa = {
		.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE,
		.qp_num = tgt->qp_num,
		.xrcd = x2,
		.qp_type = IBV_QPT_XRC_RECV,
	};
	struct ibv_qp *opened = ibv_open_qp(two, &oa);
	if (!opened || opened->qp_num != tgt->qp_num)
		FAIL("ibv_open_qp: %s", strerror(errno));
	struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	if (ibv_modify_qp(opened, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						 IBV_QP_ACCESS_FLAGS))
		FAIL("modify the opened QP");
	struct ibv_qp_init_attr init;
	if (ibv_query_qp(tgt, &attr, IBV_QP_STATE, &init) || attr.qp_state != IBV_QPS_INIT)
		FAIL("the creator does not see the opener's INIT");
	oa.qp_num = tgt->qp_num + 1000;
	if (ibv_open_qp(two, &oa) || errno != EINVAL)
		FAIL("opening a QP outside the domain was not EINVAL");
	if (ibv_destroy_qp(opened) || ibv_close_xrcd(x2))
		FAIL("the second program's close");

	/* The creator's domain still has its SRQ and QP. */
	if (ibv_close_xrcd(x1) != EBUSY)
		FAIL("closing a domain in use was not EBUSY");
	if (ibv_destroy_qp(tgt) || ibv_destroy_srq(srq) || ibv_close_xrcd(x1))
		FAIL("the first program's close");
	printf("xrc_domain: ok\n");
	return 0;
}
