/* spawnkit's process table: a BPF task iterator (SEC "iter/task", Linux 5.8+).
 *
 * Reading the iterator's fd runs this program once per task (every thread) and once more with
 * task == NULL at the end. It writes, with bpf_seq_write, one fixed-size binary record per
 * thread-group leader; the first call of each read session writes a header first. The layout
 * is mirrored by crates/spawnkit-observe/src/task_iter.rs (check_header, process): change both
 * together and bump SPAWNKIT_LAYOUT_VERSION.
 *
 * Every field is the kernel's own, read the way fs/proc/array.c (do_task_stat) reads it, so
 * the records agree with /proc/PID/stat: the state is left raw (state, exit_state) for the
 * reader to map to a letter; start_boottime stays in nanoseconds; rss is in pages.
 *
 * Built by this crate's build.rs with `clang -target bpf -O2 -g -c`; kernel.h declares the
 * kernel structs with preserve_access_index, so every field offset is a CO-RE relocation that
 * the loader (src/task_iter/core.rs) resolves against /sys/kernel/btf/vmlinux. The program
 * must stay self-contained: no maps, no global data, no calls to other functions (the loader
 * knows only CO-RE relocations and the one kfunc below); helpers are called by number.
 */
#include "kernel.h"

#define SEC(name) __attribute__((section(name), used))

/* Helpers (include/uapi/linux/bpf.h, "FN(...)" list: the number is the helper's id). */
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static __u64 (*bpf_get_current_task)(void) = (void *)35;
static long (*bpf_probe_read_kernel)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)113;
static long (*bpf_seq_write)(struct seq_file *m, const void *data, __u32 len) = (void *)127;

/* A kfunc (Linux 6.2+; kernel/bpf/helpers.c): returns `obj` itself, typed as an untrusted
 * pointer to the kernel type `btf_id`. Loads through an untrusted pointer are checked as plain
 * fault-safe reads; loads through the iterator's trusted `task` would make the verifier look
 * up, for every pointer field read, whether the field is marked trusted or RCU-protected: a
 * linear search of vmlinux's ~126k types each time, 5 ms of BPF_PROG_LOAD on 6.18. The
 * loader turns the call into `r0 = r1` on kernels without it (which also lack those lookups).
 */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __attribute__((section(".ksyms")));

/* clang's CO-RE builtins (what libbpf's bpf_core_read.h wraps). */
#define BPF_FIELD_EXISTS 2
#define field_exists(field) __builtin_preserve_field_info(field, BPF_FIELD_EXISTS)
#define BPF_TYPE_ID_TARGET 1
#define kernel_type_id(type) __builtin_btf_type_id(*(type *)0, BPF_TYPE_ID_TARGET)

#define SPAWNKIT_MAGIC 0x4b505350u /* "PSPK" read as little-endian bytes */
#define SPAWNKIT_LAYOUT_VERSION 2

/* include/linux/sched.h */
#define PF_KTHREAD 0x00200000u
/* include/linux/mm_types_task.h: enum { MM_FILEPAGES, MM_ANONPAGES, MM_SWAPENTS, MM_SHMEMPAGES } */
#define MM_FILEPAGES 0
#define MM_ANONPAGES 1
#define MM_SHMEMPAGES 3

/* Written once, before the first record of a read session. */
struct header {
	__u32 magic;
	__u16 version;
	__u16 record_size;
	/* The reader, as the kernel sees it: its global tgid and the level of its pid namespace
	 * (0: the initial one; records carry global pids, right only at level 0). */
	__u32 reader_tgid;
	__u32 reader_pidns_level;
	/* The boottime offset (ns) of the reader's time namespace, which /proc adds to start
	 * times (timens_add_boottime_ns(): current->nsproxy->time_ns, not the namespace of the
	 * reader's children that /proc/self/timens_offsets shows); 0 before Linux 5.6. */
	__s64 reader_boottime_offset;
};

/* One per thread-group leader. */
struct record {
	__u64 start_boottime; /* task->start_boottime, ns since boot (suspend included) */
	__u64 rss_pages;      /* file + anon + shmem mm counters, each clamped at 0; 0 without mm */
	__s32 pid;            /* task->tgid (global) */
	__s32 ppid;           /* task->real_parent->tgid; 0 for init, kthreadd, or a dead task */
	__u32 euid;           /* task->real_cred->euid (the objective creds, as /proc shows) */
	__u32 nr_threads;     /* task->signal->nr_threads */
	__u32 state;          /* task->__state (task->state before 5.14) */
	__u32 exit_state;     /* task->exit_state */
	char comm[16];        /* task->comm, NUL-padded */
};

_Static_assert(sizeof(struct header) == 24, "header layout");
_Static_assert(sizeof(struct record) == 56, "record layout");

/* percpu_counter_read_positive(), as get_mm_counter() does. The index must be a constant at
 * each use: a CO-RE relocation covers one whole access path (rss_stat[N].count), scaled by the
 * kernel's element size; a computed index would be scaled by this file's smaller struct. */
static inline __attribute__((always_inline)) __u64 positive(__s64 v)
{
	return v > 0 ? (__u64)v : 0;
}

#define COUNTER(mm, N)                                                                      \
	(field_exists((mm)->rss_stat[N].count)                                              \
		 ? positive((mm)->rss_stat[N].count)                                        \
		 : positive(((struct mm_struct___old *)(mm))->rss_stat.count[N].counter))

static void write_header(struct seq_file *seq)
{
	struct header h = {};
	struct task_struct *me = (void *)bpf_get_current_task();
	struct pid *pid = 0;
	unsigned int level = ~0u;
	struct nsproxy *ns = 0;
	struct time_namespace *time_ns = 0;
	struct timespec64 boot = {};

	bpf_probe_read_kernel(&pid, sizeof(pid), &me->thread_pid);
	if (pid)
		bpf_probe_read_kernel(&level, sizeof(level), &pid->level);
	bpf_probe_read_kernel(&ns, sizeof(ns), &me->nsproxy);
	if (ns && field_exists(ns->time_ns)) {
		bpf_probe_read_kernel(&time_ns, sizeof(time_ns), &ns->time_ns);
		if (time_ns)
			bpf_probe_read_kernel(&boot, sizeof(boot), &time_ns->offsets.boottime);
	}
	h.magic = SPAWNKIT_MAGIC;
	h.version = SPAWNKIT_LAYOUT_VERSION;
	h.record_size = sizeof(struct record);
	h.reader_tgid = bpf_get_current_pid_tgid() >> 32;
	h.reader_pidns_level = level;
	h.reader_boottime_offset = boot.tv_sec * 1000000000 + boot.tv_nsec;
	bpf_seq_write(seq, &h, sizeof(h));
}

SEC("iter/task")
int spawnkit_tasks(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	struct record r = {};
	struct mm_struct *mm;

	if (ctx->meta->seq_num == 0)
		write_header(seq);
	if (!task)
		return 0;
	/* The same register, checked non-NULL: where the loader turns the call into r0 = r1. */
	task = bpf_rdonly_cast(task, kernel_type_id(struct task_struct));
	if (task->pid != task->tgid)
		return 0;

	r.pid = task->tgid;
	if (task->thread_pid) /* pid_alive() */
		r.ppid = task->real_parent->tgid;
	r.euid = task->real_cred->euid.val;
	r.nr_threads = task->signal->nr_threads;
	r.start_boottime = task->start_boottime;
	if (field_exists(task->__state)) {
		r.state = task->__state;
	} else {
		struct task_struct___old *old = (void *)task;
		r.state = old->state;
	}
	r.exit_state = task->exit_state;
	mm = task->mm;
	if (mm && !(task->flags & PF_KTHREAD)) /* get_task_mm() gives kernel threads no mm */
		r.rss_pages = COUNTER(mm, MM_FILEPAGES) + COUNTER(mm, MM_ANONPAGES) +
			      COUNTER(mm, MM_SHMEMPAGES);
	bpf_probe_read_kernel(r.comm, sizeof(r.comm), task->comm);
	bpf_seq_write(seq, &r, sizeof(r));
	return 0;
}

/* bpf_seq_write and bpf_probe_read_kernel are GPL-only helpers; this program is offered under
 * MIT or GPL, which the kernel accepts as GPL-compatible. */
char LICENSE[] SEC("license") = "Dual MIT/GPL";
