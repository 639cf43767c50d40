/* softrnic-conform: runs verbs and rdma_cm call sequences and prints what each call gave, a
 * line per call, in a form that does not depend on the provider's numbering (no QPNs, keys or
 * addresses): return value or errno name, completion statuses, CM events, QP states. The
 * differential test runs the same sequences on softrnic and on kernel rxe with kernel
 * rdma_cm and compares the lines.
 *
 * Usage: softrnic-conform LOCAL_IPV4 < SEQUENCES. Each sequence starts with a line "--- NAME"
 * and runs in a child process of its own (a crash ends only it); its lines are printed after
 * a line "=== NAME". A line is "OP NAME ARGS...": NAME is the object the call makes, or the one
 * it acts on; every other argument is a number, a word or an object's name (a call naming one
 * the sequence does not hold prints "no object: NAME" and is skipped). The ops are in
 * the table at the end. Addresses: "local", "any", "any6", "loop", "loop6", "far" (an address
 * of the local subnet no host has: 198.18.2.77 is the test's), "unrouted", "unspec" (family 0)
 * with ":PORT". */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <setjmp.h>
#include <rdma/rdma_cma.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_OBJECTS 64
#define MAX_ARGS 16
/* The longest a CM event or a completion is waited for: a TCG guest's timers are slow. */
#define WAIT_MS 4000

enum kind { PD, MR, CQ, QP, SRQ, MW, AH, CHANNEL, ID };

struct object {
    char name[16];
    enum kind kind;
    void *p;
    void *buf; /* an MR's memory */
    size_t len;
};

static struct ibv_context *ctx;
static union ibv_gid gid;
static int gid_index = -1;
static const char *local_ip;
static struct object objects[MAX_OBJECTS];
static int nobjects;
/* Where a call that names an object the sequence does not hold is abandoned. */
static jmp_buf skip;

static void out(const char *op, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s: ", op);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
}

static const char *errname(int e) {
    const char *n = e ? strerrorname_np(e) : "0";
    return n ? n : "E?";
}

/* A call that returns 0 or an errno (verbs) or -1 with errno (rdma_cm). */
static void rc(const char *op, int r) {
    if (r == 0)
        out(op, "ok");
    else
        out(op, "err %s", errname(r > 0 ? r : errno));
}

static struct object *find(const char *name, enum kind kind) {
    for (int i = 0; i < nobjects; i++)
        if (objects[i].p && !strcmp(objects[i].name, name) && objects[i].kind == kind)
            return &objects[i];
    return NULL;
}

static void *get(const char *name, enum kind kind) {
    struct object *o = find(name, kind);
    if (!o && strcmp(name, "-")) {
        out("no object", "%s", name);
        longjmp(skip, 1);
    }
    return o ? o->p : NULL;
}

static struct object *add(const char *op, const char *name, enum kind kind, void *p) {
    if (!p) {
        out(op, "err %s", errname(errno));
        return NULL;
    }
    if (nobjects == MAX_OBJECTS)
        exit(4);
    struct object *o = &objects[nobjects++];
    snprintf(o->name, sizeof o->name, "%s", name);
    o->kind = kind;
    o->p = p;
    out(op, "ok");
    return o;
}

static void forget(const char *name, enum kind kind, int r) {
    if (r == 0)
        find(name, kind)->p = NULL;
}

/* OP NAME: destroys NAME with CALL; it is gone once the call succeeds. */
#define DESTROY(op, call, kind)                                                                   \
    static void op(char **a, int n) {                                                             \
        (void)n;                                                                                  \
        int r = call(get(a[0], kind));                                                            \
        rc(#op, r);                                                                               \
        forget(a[0], kind, r);                                                                    \
    }

static long num(const char *s) { return strtol(s, NULL, 0); }

/* An argument "key=value" of args[from..], or def. */
static long opt(char **args, int n, int from, const char *key, long def) {
    size_t k = strlen(key);
    for (int i = from; i < n; i++)
        if (!strncmp(args[i], key, k) && args[i][k] == '=')
            return num(args[i] + k + 1);
    return def;
}

static int addr(const char *s, struct sockaddr_storage *ss) {
    char host[64];
    const char *colon = strrchr(s, ':');
    int port = colon ? atoi(colon + 1) : 0;
    snprintf(host, sizeof host, "%.*s", colon ? (int)(colon - s) : (int)strlen(s), s);
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *in = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    const char *ip = !strcmp(host, "local") ? local_ip
                     : !strcmp(host, "any")  ? "0.0.0.0"
                     : !strcmp(host, "loop") ? "127.0.0.1"
                     : !strcmp(host, "far")  ? "198.18.2.77"
                     : !strcmp(host, "unrouted") ? "198.19.99.99"
                                             : NULL;
    if (!strcmp(host, "unspec"))
        return 0; /* family 0: AF_UNSPEC */
    if (!strcmp(host, "any6") || !strcmp(host, "loop6")) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
        if (!strcmp(host, "loop6"))
            in6->sin6_addr = in6addr_loopback;
        return 0;
    }
    if (!ip)
        return -1;
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    inet_pton(AF_INET, ip, &in->sin_addr);
    return 0;
}

static const char *qp_state(enum ibv_qp_state s) {
    static const char *names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    return s <= IBV_QPS_ERR ? names[s] : "?";
}

static int state_of(const char *s) {
    static const char *names[] = {"reset", "init", "rtr", "rts", "sqd", "sqe", "err"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(s, names[i]))
            return i;
    return 99;
}

static int qp_type_of(const char *s) {
    return !strcmp(s, "rc")    ? IBV_QPT_RC
           : !strcmp(s, "uc")  ? IBV_QPT_UC
           : !strcmp(s, "ud")  ? IBV_QPT_UD
           : !strcmp(s, "raw") ? IBV_QPT_RAW_PACKET
           : !strcmp(s, "xrc") ? IBV_QPT_XRC_SEND
                               : (int)num(s);
}

/* --- verbs --- */

static void alloc_pd(char **a, int n) { (void)n; add("alloc_pd", a[0], PD, ibv_alloc_pd(ctx)); }

DESTROY(dealloc_pd, ibv_dealloc_pd, PD)

/* reg_mr NAME PD LEN ACCESS */
static void reg_mr(char **a, int n) {
    (void)n;
    size_t len = num(a[2]);
    void *buf = NULL;
    if (posix_memalign(&buf, 4096, len ? len : 1))
        exit(5);
    memset(buf, 0x5a, len);
    struct object *o = add("reg_mr", a[0], MR, ibv_reg_mr(get(a[1], PD), buf, len, num(a[3])));
    if (o)
        o->buf = buf, o->len = len;
}

DESTROY(dereg_mr, ibv_dereg_mr, MR)

/* create_cq NAME CQE */
static void create_cq(char **a, int n) {
    (void)n;
    add("create_cq", a[0], CQ, ibv_create_cq(ctx, num(a[1]), NULL, NULL, 0));
}

DESTROY(destroy_cq, ibv_destroy_cq, CQ)

/* resize_cq CQ CQE */
static void resize_cq(char **a, int n) {
    (void)n;
    rc("resize_cq", ibv_resize_cq(get(a[0], CQ), num(a[1])));
}

/* create_srq NAME PD WR SGE */
static void create_srq(char **a, int n) {
    (void)n;
    struct ibv_srq_init_attr attr = {.attr = {.max_wr = num(a[2]), .max_sge = num(a[3])}};
    add("create_srq", a[0], SRQ, ibv_create_srq(get(a[1], PD), &attr));
}

DESTROY(destroy_srq, ibv_destroy_srq, SRQ)

/* create_qp NAME PD SCQ RCQ TYPE SWR RWR SGE INLINE [srq=NAME is not numeric: srq NAME] */
static void create_qp(char **a, int n) {
    struct ibv_qp_init_attr attr = {
        .send_cq = get(a[2], CQ),
        .recv_cq = get(a[3], CQ),
        .qp_type = qp_type_of(a[4]),
        .cap = {.max_send_wr = num(a[5]), .max_recv_wr = num(a[6]), .max_send_sge = num(a[7]),
                .max_recv_sge = num(a[7]), .max_inline_data = num(a[8])},
        .sq_sig_all = 1,
    };
    if (n > 10 && !strcmp(a[9], "srq"))
        attr.srq = get(a[10], SRQ);
    add("create_qp", a[0], QP, ibv_create_qp(get(a[1], PD), &attr));
}

DESTROY(destroy_qp, ibv_destroy_qp, QP)

/* modify_qp QP STATE [PEER|-] [key=value...]: the attributes a pingpong sets for the state,
 * to PEER's QPN (a QP of this sequence, on the same device: loopback), with overrides; drop=M
 * takes mask bits M away, add=M puts bits M in. */
static void modify_qp(char **a, int n) {
    struct ibv_qp *qp = get(a[0], QP);
    struct ibv_qp *peer = n > 2 && !strchr(a[2], '=') ? get(a[2], QP) : NULL;
    struct ibv_qp_attr attr = {.qp_state = state_of(a[1])};
    int mask = IBV_QP_STATE;
    int ud = qp->qp_type == IBV_QPT_UD;
    switch (attr.qp_state) {
    case IBV_QPS_INIT:
        attr.pkey_index = opt(a, n, 2, "pkey", 0);
        attr.port_num = opt(a, n, 2, "port", 1);
        mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT;
        if (ud) {
            attr.qkey = 0x11111111;
            mask |= IBV_QP_QKEY;
        } else {
            attr.qp_access_flags = opt(a, n, 2, "access", 0xf);
            mask |= IBV_QP_ACCESS_FLAGS;
        }
        break;
    case IBV_QPS_RTR:
        if (ud)
            break;
        attr.path_mtu = opt(a, n, 2, "mtu", IBV_MTU_1024);
        attr.dest_qp_num = peer ? peer->qp_num : (uint32_t)opt(a, n, 2, "dqpn", 0xffffff);
        attr.rq_psn = 0;
        attr.ah_attr = (struct ibv_ah_attr){
            .is_global = 1,
            .port_num = opt(a, n, 2, "port", 1),
            .grh = {.dgid = gid, .sgid_index = opt(a, n, 2, "sgid", gid_index), .hop_limit = 1},
        };
        mask |= IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_AV;
        if (qp->qp_type == IBV_QPT_RC) {
            attr.max_dest_rd_atomic = opt(a, n, 2, "dest_rd_atomic", 1);
            attr.min_rnr_timer = opt(a, n, 2, "min_rnr", 12);
            mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        }
        break;
    case IBV_QPS_RTS:
        attr.sq_psn = 0;
        mask |= IBV_QP_SQ_PSN;
        if (qp->qp_type == IBV_QPT_RC) {
            attr.timeout = opt(a, n, 2, "timeout", 14);
            attr.retry_cnt = opt(a, n, 2, "retry", 7);
            attr.rnr_retry = opt(a, n, 2, "rnr_retry", 7);
            attr.max_rd_atomic = opt(a, n, 2, "rd_atomic", 1);
            mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
        }
        break;
    default:
        break;
    }
    mask = (mask & ~(int)opt(a, n, 2, "drop", 0)) | (int)opt(a, n, 2, "add", 0);
    rc("modify_qp", ibv_modify_qp(qp, &attr, mask));
}

/* query_qp QP: its state as the provider says it. */
static void query_qp(char **a, int n) {
    (void)n;
    struct ibv_qp_attr attr;
    struct ibv_qp_init_attr init;
    int r = ibv_query_qp(get(a[0], QP), &attr, IBV_QP_STATE | IBV_QP_CUR_STATE, &init);
    if (r)
        rc("query_qp", r);
    else
        out("query_qp", "%s", qp_state(attr.qp_state));
}

static int opcode_of(const char *s) {
    return !strcmp(s, "send")       ? IBV_WR_SEND
           : !strcmp(s, "send_imm") ? IBV_WR_SEND_WITH_IMM
           : !strcmp(s, "write")    ? IBV_WR_RDMA_WRITE
           : !strcmp(s, "write_imm") ? IBV_WR_RDMA_WRITE_WITH_IMM
           : !strcmp(s, "read")     ? IBV_WR_RDMA_READ
           : !strcmp(s, "cas")      ? IBV_WR_ATOMIC_CMP_AND_SWP
           : !strcmp(s, "fadd")     ? IBV_WR_ATOMIC_FETCH_AND_ADD
                                    : (int)num(s);
}

/* post_send QP OPCODE MR OFFSET LEN [RMR ROFFSET] [inline=1] [ah=NAME] */
static void post_send(char **a, int n) {
    struct object *mr = find(a[2], MR);
    struct ibv_sge sge = {0};
    if (mr) {
        struct ibv_mr *m = mr->p;
        sge = (struct ibv_sge){(uintptr_t)mr->buf + num(a[3]), num(a[4]), m->lkey};
    }
    struct ibv_send_wr wr = {
        .wr_id = 1, .sg_list = &sge, .num_sge = num(a[4]) ? 1 : 0,
        .opcode = opcode_of(a[1]), .send_flags = IBV_SEND_SIGNALED,
    }, *bad = NULL;
    if (opt(a, n, 5, "inline", 0))
        wr.send_flags |= IBV_SEND_INLINE;
    struct object *r = n > 6 ? find(a[5], MR) : NULL;
    if (r) {
        struct ibv_mr *m = r->p;
        uint64_t raddr = (uintptr_t)r->buf + num(a[6]);
        if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
            wr.wr.atomic = (typeof(wr.wr.atomic)){raddr, 1, 2, m->rkey};
        else
            wr.wr.rdma = (typeof(wr.wr.rdma)){raddr, m->rkey};
    }
    for (int i = 5; i < n; i++)
        if (!strncmp(a[i], "ah=", 3)) {
            wr.wr.ud.ah = get(a[i] + 3, AH);
            wr.wr.ud.remote_qpn = ((struct ibv_qp *)get(a[0], QP))->qp_num;
            wr.wr.ud.remote_qkey = 0x11111111;
        }
    rc("post_send", ibv_post_send(get(a[0], QP), &wr, &bad));
}

/* post_recv QP MR OFFSET LEN */
static void post_recv(char **a, int n) {
    (void)n;
    struct object *mr = find(a[1], MR);
    struct ibv_sge sge = {0};
    if (mr)
        sge = (struct ibv_sge){(uintptr_t)mr->buf + num(a[2]), num(a[3]), ((struct ibv_mr *)mr->p)->lkey};
    struct ibv_recv_wr wr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
    struct object *srq = find(a[0], SRQ);
    rc("post_recv", srq ? ibv_post_srq_recv(srq->p, &wr, &bad)
                        : ibv_post_recv(get(a[0], QP), &wr, &bad));
}

/* poll CQ N: waits for N completions (or the longest wait) and prints each. */
static void poll_cq(char **a, int n) {
    (void)n;
    struct ibv_cq *cq = get(a[0], CQ);
    int want = num(a[1]), got = 0;
    for (int waited = 0; got < want && waited < WAIT_MS;) {
        struct ibv_wc wc;
        int r = ibv_poll_cq(cq, 1, &wc);
        if (r < 0) {
            out("poll", "err %d", r);
            return;
        }
        if (r == 0) {
            usleep(1000);
            waited++;
            continue;
        }
        got++;
        if (wc.status == IBV_WC_SUCCESS)
            out("poll", "wc %s opcode %d len %u", ibv_wc_status_str(wc.status), wc.opcode,
                wc.opcode & IBV_WC_RECV ? wc.byte_len : 0);
        else
            out("poll", "wc %s", ibv_wc_status_str(wc.status));
    }
    if (got < want)
        out("poll", "%d of %d", got, want);
}

/* check MR OFFSET BYTE: what the memory holds. */
static void check(char **a, int n) {
    (void)n;
    struct object *mr = find(a[0], MR);
    out("check", "%02x", ((unsigned char *)mr->buf)[num(a[1])]);
}

/* alloc_mw NAME PD TYPE */
static void alloc_mw(char **a, int n) {
    (void)n;
    add("alloc_mw", a[0], MW, ibv_alloc_mw(get(a[1], PD), num(a[2])));
}

DESTROY(dealloc_mw, ibv_dealloc_mw, MW)

/* create_ah NAME PD [sgid=N] [port=N]: to this device's own GID. */
static void create_ah(char **a, int n) {
    struct ibv_ah_attr attr = {
        .is_global = 1,
        .port_num = opt(a, n, 2, "port", 1),
        .grh = {.dgid = gid, .sgid_index = opt(a, n, 2, "sgid", gid_index), .hop_limit = 1},
    };
    add("create_ah", a[0], AH, ibv_create_ah(get(a[1], PD), &attr));
}

DESTROY(destroy_ah, ibv_destroy_ah, AH)

/* query_port PORT */
static void query_port(char **a, int n) {
    (void)n;
    struct ibv_port_attr attr;
    int r = ibv_query_port(ctx, num(a[0]), &attr);
    if (r)
        rc("query_port", r);
    else
        out("query_port", "state %d link_layer %d", attr.state, attr.link_layer);
}

/* query_gid PORT INDEX: whether it answers (the table's contents differ by design). */
static void query_gid(char **a, int n) {
    (void)n;
    union ibv_gid g;
    rc("query_gid", ibv_query_gid(ctx, num(a[0]), num(a[1]), &g));
}

/* --- rdma_cm --- */

static void create_channel(char **a, int n) {
    (void)n;
    add("create_channel", a[0], CHANNEL, rdma_create_event_channel());
}

static void destroy_channel(char **a, int n) {
    (void)n;
    rdma_destroy_event_channel(get(a[0], CHANNEL));
    find(a[0], CHANNEL)->p = NULL;
    out("destroy_channel", "done");
}

/* create_id NAME CHANNEL PS: tcp, udp, ipoib or a number */
static void create_id(char **a, int n) {
    (void)n;
    int ps = !strcmp(a[2], "tcp")     ? RDMA_PS_TCP
             : !strcmp(a[2], "udp")   ? RDMA_PS_UDP
             : !strcmp(a[2], "ipoib") ? RDMA_PS_IPOIB
                                      : (int)num(a[2]);
    struct rdma_cm_id *id = NULL;
    int r = rdma_create_id(get(a[1], CHANNEL), &id, NULL, ps);
    if (r)
        rc("create_id", r);
    else
        add("create_id", a[0], ID, id);
}

DESTROY(destroy_id, rdma_destroy_id, ID)

/* set_option ID reuse|afonly|tos|ack_timeout VALUE */
static void set_option(char **a, int n) {
    (void)n;
    int name = !strcmp(a[1], "reuse")    ? RDMA_OPTION_ID_REUSEADDR
               : !strcmp(a[1], "afonly") ? RDMA_OPTION_ID_AFONLY
               : !strcmp(a[1], "tos")    ? RDMA_OPTION_ID_TOS
                                         : RDMA_OPTION_ID_ACK_TIMEOUT;
    int v = num(a[2]);
    uint8_t b = v;
    void *p = name == RDMA_OPTION_ID_TOS || name == RDMA_OPTION_ID_ACK_TIMEOUT ? (void *)&b : &v;
    size_t len = p == &b ? 1 : sizeof v;
    rc("set_option", rdma_set_option(get(a[0], ID), RDMA_OPTION_ID, name, p, len));
}

/* bind ID ADDR */
static void bind_(char **a, int n) {
    (void)n;
    struct sockaddr_storage ss;
    addr(a[1], &ss);
    rc("bind", rdma_bind_addr(get(a[0], ID), (struct sockaddr *)&ss));
}

/* resolve_addr ID SRC|- DST */
static void resolve_addr(char **a, int n) {
    (void)n;
    struct sockaddr_storage src, dst;
    int has_src = strcmp(a[1], "-") != 0;
    if (has_src)
        addr(a[1], &src);
    addr(a[2], &dst);
    rc("resolve_addr", rdma_resolve_addr(get(a[0], ID), has_src ? (struct sockaddr *)&src : NULL,
                                         (struct sockaddr *)&dst, 2000));
}

static void resolve_route(char **a, int n) {
    (void)n;
    rc("resolve_route", rdma_resolve_route(get(a[0], ID), 2000));
}

/* listen ID BACKLOG */
static void listen_(char **a, int n) {
    (void)n;
    rc("listen", rdma_listen(get(a[0], ID), num(a[1])));
}

/* cm_create_qp ID PD CQ: an RC (or UD, for a UDP id) QP for the id. */
static void cm_create_qp(char **a, int n) {
    (void)n;
    struct rdma_cm_id *id = get(a[0], ID);
    struct ibv_cq *cq = get(a[2], CQ);
    struct ibv_qp_init_attr attr = {
        .send_cq = cq, .recv_cq = cq,
        .qp_type = id->ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC,
        .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
    };
    rc("cm_create_qp", rdma_create_qp(id, get(a[1], PD), &attr));
}

/* cm_pd NAME ID, cm_cq NAME ID CQE: on the id's own device context, as rdma_create_qp needs. */
static void cm_pd(char **a, int n) {
    (void)n;
    add("cm_pd", a[0], PD, ibv_alloc_pd(((struct rdma_cm_id *)get(a[1], ID))->verbs));
}

static void cm_cq(char **a, int n) {
    (void)n;
    struct rdma_cm_id *id = get(a[1], ID);
    add("cm_cq", a[0], CQ, ibv_create_cq(id->verbs, num(a[2]), NULL, NULL, 0));
}

static void cm_destroy_qp(char **a, int n) {
    (void)n;
    rdma_destroy_qp(get(a[0], ID));
    out("cm_destroy_qp", "done");
}

static struct rdma_conn_param conn_param(void) {
    return (struct rdma_conn_param){.responder_resources = 1, .initiator_depth = 1,
                                    .retry_count = 7, .rnr_retry_count = 7};
}

static void connect_(char **a, int n) {
    (void)n;
    struct rdma_conn_param p = conn_param();
    rc("connect", rdma_connect(get(a[0], ID), &p));
}

static void accept_(char **a, int n) {
    (void)n;
    struct rdma_conn_param p = conn_param();
    rc("accept", rdma_accept(get(a[0], ID), &p));
}

static void reject(char **a, int n) {
    (void)n;
    rc("reject", rdma_reject(get(a[0], ID), NULL, 0));
}

static void disconnect(char **a, int n) {
    (void)n;
    rc("disconnect", rdma_disconnect(get(a[0], ID)));
}

/* event CHANNEL [NAME]: the next event (a CONNECT_REQUEST's new id is named NAME) or none
 * within the longest wait. The status of a REJECTED event is the IBA reason. */
static void event(char **a, int n) {
    struct rdma_event_channel *ch = get(a[0], CHANNEL);
    struct pollfd p = {.fd = ch->fd, .events = POLLIN};
    if (poll(&p, 1, WAIT_MS) != 1) {
        out("event", "none");
        return;
    }
    struct rdma_cm_event *e;
    if (rdma_get_cm_event(ch, &e)) {
        rc("event", -1);
        return;
    }
    out("event", "%s %d", rdma_event_str(e->event), e->status);
    if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST && n > 1) {
        struct object *o = &objects[nobjects++];
        snprintf(o->name, sizeof o->name, "%s", a[1]);
        o->kind = ID;
        o->p = e->id;
    }
    rdma_ack_cm_event(e);
}

/* no_event CHANNEL MS: that nothing comes within MS. */
static void no_event(char **a, int n) {
    (void)n;
    struct rdma_event_channel *ch = get(a[0], CHANNEL);
    struct pollfd p = {.fd = ch->fd, .events = POLLIN};
    out("no_event", poll(&p, 1, num(a[1])) == 1 ? "an event" : "none");
}

static const struct {
    const char *name;
    int args;
    void (*run)(char **, int);
} ops[] = {
    {"alloc_pd", 1, alloc_pd},     {"dealloc_pd", 1, dealloc_pd},
    {"reg_mr", 4, reg_mr},         {"dereg_mr", 1, dereg_mr},
    {"create_cq", 2, create_cq},   {"destroy_cq", 1, destroy_cq},
    {"resize_cq", 2, resize_cq},   {"create_srq", 4, create_srq},
    {"destroy_srq", 1, destroy_srq}, {"create_qp", 9, create_qp},
    {"destroy_qp", 1, destroy_qp}, {"modify_qp", 2, modify_qp},
    {"query_qp", 1, query_qp},     {"post_send", 5, post_send},
    {"post_recv", 4, post_recv},   {"poll", 2, poll_cq},
    {"check", 2, check},           {"alloc_mw", 3, alloc_mw},
    {"dealloc_mw", 1, dealloc_mw}, {"create_ah", 2, create_ah},
    {"destroy_ah", 1, destroy_ah}, {"query_port", 1, query_port},
    {"query_gid", 2, query_gid},   {"create_channel", 1, create_channel},
    {"destroy_channel", 1, destroy_channel}, {"create_id", 3, create_id},
    {"destroy_id", 1, destroy_id}, {"set_option", 3, set_option},
    {"bind", 2, bind_},             {"resolve_addr", 3, resolve_addr},
    {"resolve_route", 1, resolve_route}, {"listen", 2, listen_},
    {"cm_pd", 2, cm_pd},           {"cm_cq", 3, cm_cq},
    {"cm_create_qp", 3, cm_create_qp}, {"cm_destroy_qp", 1, cm_destroy_qp},
    {"connect", 1, connect_},      {"accept", 1, accept_},
    {"reject", 1, reject},         {"disconnect", 1, disconnect},
    {"event", 1, event},           {"no_event", 2, no_event},
};

/* The device with the GID that is IPv4-mapped LOCAL_IP (RoCEv2 over IPv4), and that GID. */
static void open_device(void) {
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct in_addr want;
    inet_pton(AF_INET, local_ip, &want);
    for (int d = 0; list && list[d] && gid_index < 0; d++) {
        ctx = ibv_open_device(list[d]);
        for (int i = 0; ctx && i < 16 && gid_index < 0; i++) {
            union ibv_gid g;
            if (ibv_query_gid(ctx, 1, i, &g) == 0 && g.raw[10] == 0xff && g.raw[11] == 0xff &&
                !memcmp(g.raw + 12, &want, 4)) {
                gid = g;
                gid_index = i;
            }
        }
        if (ctx && gid_index < 0)
            ibv_close_device(ctx);
    }
    if (list)
        ibv_free_device_list(list);
    if (gid_index < 0) {
        printf("no device has a GID for %s\n", local_ip);
        exit(2);
    }
}

static void run(char *seq) {
    open_device();
    for (char *line = strtok(seq, "\n"); line; line = strtok(NULL, "\n")) {
        char *args[MAX_ARGS + 1], *save = NULL;
        int n = 0;
        char *op = strtok_r(line, " ", &save);
        if (!op || op[0] == '#')
            continue;
        while (n < MAX_ARGS && (args[n] = strtok_r(NULL, " ", &save)))
            n++;
        size_t i = 0;
        while (i < sizeof ops / sizeof ops[0] && strcmp(ops[i].name, op))
            i++;
        if (i == sizeof ops / sizeof ops[0] || n < ops[i].args) {
            fprintf(stderr, "bad line: %s\n", op);
            exit(3);
        }
        if (!setjmp(skip))
            ops[i].run(args, n);
    }
    exit(0);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: softrnic-conform LOCAL_IPV4 < SEQUENCES\n");
        return 2;
    }
    local_ip = argv[1];
    static char input[1 << 22];
    size_t len = fread(input, 1, sizeof input - 1, stdin);
    input[len] = 0;
    for (char *seq = strstr(input, "--- "), *next; seq; seq = next) {
        next = strstr(seq, "\n--- ");
        if (next)
            *next++ = 0;
        char *body = strchr(seq, '\n');
        if (body)
            *body++ = 0;
        printf("=== %s\n", seq + 4);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0)
            run(body ? body : "");
        int status;
        waitpid(pid, &status, 0);
        if (WIFSIGNALED(status))
            printf("killed by signal %d\n", WTERMSIG(status));
        else if (WEXITSTATUS(status))
            printf("exit %d\n", WEXITSTATUS(status));
    }
    return 0;
}
