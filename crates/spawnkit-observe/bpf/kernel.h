/* The few kernel types task_iter.bpf.c reads, declared by hand.
 *
 * Only the fields the program touches are listed, in any order and at any offset: every struct
 * carries preserve_access_index, so clang records each field access as a CO-RE relocation
 * (by name and type) and the loader (src/task_iter/core.rs) rewrites the offsets against the running kernel's BTF
 * (/sys/kernel/btf/vmlinux). No generated vmlinux.h, no libbpf headers.
 *
 * Types whose name ends in ___something are "flavours": the relocation matches the kernel type
 * named before the ___, so one program can read a field under its old and its new layout.
 */
#ifndef SPAWNKIT_KERNEL_H
#define SPAWNKIT_KERNEL_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;

#define CORE __attribute__((preserve_access_index))

struct seq_file;

/* include/linux/bpf.h: what every iterator program gets in its context. */
struct bpf_iter_meta {
	struct seq_file *seq;
	__u64 session_id;
	__u64 seq_num;
} CORE;

/* kernel/bpf/task_iter.c: the context of an iter/task program; task is NULL on the last call. */
struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
} CORE;

typedef struct {
	__u32 val;
} kuid_t;

/* include/linux/cred.h */
struct cred {
	kuid_t euid;
} CORE;

/* include/linux/sched/signal.h */
struct signal_struct {
	int nr_threads;
} CORE;

/* include/linux/percpu_counter.h (SMP): `count` is what percpu_counter_read() returns. */
struct percpu_counter {
	__s64 count;
} CORE;

/* include/linux/mm_types.h since 6.2: one percpu_counter per MM_* counter. */
struct mm_struct {
	struct percpu_counter rss_stat[4];
} CORE;

/* Before 6.2: struct mm_rss_stat { atomic_long_t count[NR_MM_COUNTERS]; }. */
typedef struct {
	__s64 counter;
} atomic_long_t___old;

struct mm_rss_stat___old {
	atomic_long_t___old count[4];
} CORE;

struct mm_struct___old {
	struct mm_rss_stat___old rss_stat;
} CORE;

/* include/linux/time64.h */
struct timespec64 {
	__s64 tv_sec;
	long tv_nsec;
} CORE;

/* include/linux/time_namespace.h (Linux 5.6+) */
struct timens_offsets {
	struct timespec64 monotonic;
	struct timespec64 boottime;
} CORE;

struct time_namespace {
	struct timens_offsets offsets;
} CORE;

/* include/linux/nsproxy.h: time_ns since Linux 5.6. */
struct nsproxy {
	struct time_namespace *time_ns;
} CORE;

/* include/linux/pid.h */
struct pid {
	unsigned int level;
} CORE;

/* include/linux/sched.h */
struct task_struct {
	unsigned int __state;
	int exit_state;
	unsigned int flags;
	int pid;
	int tgid;
	struct task_struct *real_parent;
	struct pid *thread_pid;
	struct nsproxy *nsproxy;
	const struct cred *real_cred;
	struct signal_struct *signal;
	struct mm_struct *mm;
	__u64 start_boottime;
	char comm[16];
} CORE;

/* Before 5.14 the state was `volatile long state`. */
struct task_struct___old {
	long state;
} CORE;

#endif
