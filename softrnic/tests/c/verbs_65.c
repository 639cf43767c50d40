/* rdma-core 65's new verbs (IBVERBS_1.15 to 1.18), built against rdma-core 65's headers, as
 * libibverbs gives them for a provider without ops of its own: ibv_reg_mr_ex and the
 * ibv_alloc_buf family work, the rest fail with EOPNOTSUPP; ibv_query_port fills the
 * newer ibv_port_attr. Prints "verbs 65: ok". */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: %s (errno %d)\n", __FILE__, __LINE__, #c, errno); exit(1); } } while (0)
#define NULL_WITH(call, e) do { errno = 0; CHECK((call) == NULL && errno == (e)); } while (0)

static void reg_mr_ex(struct ibv_pd *pd)
{
	static char buf[8192];
	struct ibv_mr_init_attr a = {
		.length = sizeof buf,
		.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
		.comp_mask = IBV_REG_MR_MASK_ADDR | IBV_REG_MR_MASK_IOVA,
		.addr = buf,
		.iova = 0x10000,
	};
	struct ibv_mr *mr = ibv_reg_mr_ex(pd, &a);
	CHECK(mr && mr->addr == buf && mr->length == sizeof buf && mr->pd == pd && mr->lkey);
	CHECK(ibv_dereg_mr(mr) == 0);
	/* As libibverbs checks: an address is needed, a DMA handle is not supported, a dma-buf
	 * registration is refused when incomplete and not supported when complete. */
	a.comp_mask = IBV_REG_MR_MASK_IOVA;
	NULL_WITH(ibv_reg_mr_ex(pd, &a), EINVAL);
	a.comp_mask = IBV_REG_MR_MASK_ADDR | IBV_REG_MR_MASK_DMAH;
	NULL_WITH(ibv_reg_mr_ex(pd, &a), EOPNOTSUPP);
	a.comp_mask = IBV_REG_MR_MASK_ADDR | IBV_REG_MR_MASK_FD;
	NULL_WITH(ibv_reg_mr_ex(pd, &a), EINVAL);
	a.comp_mask = IBV_REG_MR_MASK_FD | IBV_REG_MR_MASK_FD_OFFSET | IBV_REG_MR_MASK_IOVA;
	NULL_WITH(ibv_reg_mr_ex(pd, &a), EOPNOTSUPP);
}

static void bufs(struct ibv_pd *pd, struct ibv_pd *other)
{
	struct ibv_buf *b;
	char *p = ibv_alloc_buf(pd, 3 * 4096, &b);
	CHECK(p && ((uintptr_t)p % sysconf(_SC_PAGESIZE)) == 0);
	memset(p, 1, 3 * 4096);
	struct ibv_mr *mr = ibv_reg_buf_mr(pd, b, p + 4096, 2 * 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr && mr->addr == p + 4096 && mr->length == 2 * 4096);
	CHECK(ibv_dereg_mr(mr) == 0);
	/* Within the buffer and its PD only. */
	NULL_WITH(ibv_reg_buf_mr(pd, b, p + 4096, 3 * 4096, IBV_ACCESS_LOCAL_WRITE), EINVAL);
	NULL_WITH(ibv_reg_buf_mr(pd, b, p - 1, 16, IBV_ACCESS_LOCAL_WRITE), EINVAL);
	NULL_WITH(ibv_reg_buf_mr(other, b, p, 16, IBV_ACCESS_LOCAL_WRITE), EINVAL);
	errno = 0;
	CHECK(ibv_export_buf_dmabuf_fd(b) == -1 && errno == ENODATA);
	ibv_free_buf(b);
}

static void unsupported(struct ibv_context *ctx, struct ibv_pd *pd)
{
	struct ibv_dmah_init_attr da = { 0 };
	NULL_WITH(ibv_alloc_dmah(ctx, &da), EOPNOTSUPP);
	uint64_t speed;
	CHECK(ibv_query_port_speed(ctx, 1, &speed) == EOPNOTSUPP);
	struct ibv_comp_cntr_caps caps;
	CHECK(ibv_query_comp_cntr_caps(ctx, &caps) == EOPNOTSUPP);
	struct ibv_comp_cntr_init_attr ca = { .type = IBV_COMP_CNTR_TYPE_WRS };
	NULL_WITH(ibv_create_comp_cntr(ctx, &ca), EOPNOTSUPP);
	(void)pd;
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n > 0);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx);
	/* rdma-core 65's ibv_port_attr ends in active_speed_ex: filled, not left as it was. */
	struct ibv_port_attr pa;
	memset(&pa, 0xa5, sizeof pa);
	CHECK(ibv_query_port(ctx, 1, &pa) == 0);
	CHECK(pa.state == IBV_PORT_ACTIVE && pa.active_speed_ex == pa.active_speed);
	struct ibv_pd *pd = ibv_alloc_pd(ctx), *other = ibv_alloc_pd(ctx);
	CHECK(pd && other);
	reg_mr_ex(pd);
	bufs(pd, other);
	unsupported(ctx, pd);
	CHECK(ibv_dealloc_pd(other) == 0 && ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	puts("verbs 65: ok");
	return 0;
}
