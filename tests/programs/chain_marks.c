/* csrc/trap/frames/chain_marks.c on its own: the marks of calls to a program's
 * SIGILL handler belong to the thread that made them, end when the call
 * returns or a jump leaves it, and a mark whose word no longer holds its
 * value is not live.  Built with csrc/trap/frames/chain_marks.c and self_copy.c.
 *
 *     chain_marks
 *
 * The calls' frames are made up: a region of a buffer stands for each
 * thread's stack, the mark's frame near its top.  One line per case,
 * "CASE ok" or "CASE FAIL: why"; exit status 0 when every case is ok. */
#define _GNU_SOURCE 1
#include "frames/frames.h"

#include <pthread.h>
#include <stdio.h>

#include "case_kit.h"

enum { REGION = 1 << 20, THREADS = 100 };

/* A made-up stack: the mark's frame lies 4 KiB below its top, the word in
 * the frame just under it. */
struct stack {
    uint8_t bytes[REGION];
};

static uintptr_t frame_of(struct stack *s) { return (uintptr_t)&s->bytes[REGION - 4096]; }
static volatile uint64_t *word_of(struct stack *s) { return (volatile uint64_t *)&s->bytes[REGION - 4096 - 64]; }
/* Where code running inside the call, or far below it, has its stack pointer. */
static uintptr_t inside_of(struct stack *s) { return frame_of(s) - 2048; }
static uintptr_t far_below(struct stack *s) { return frame_of(s) - (512u << 10); }
static uintptr_t above_of(struct stack *s) { return frame_of(s) + 1024; }

static struct stack stacks[3];
static pthread_barrier_t step;

/* A call begun on s by the calling thread, and live just below its frame;
 * NULL when both hold. */
static const char *enter_live(struct stack *s, int *mark)
{
    *mark = chainmark_enter(frame_of(s), word_of(s));
    if (*mark < 0)
        return "no mark was made";
    if (!chainmark_inside(inside_of(s)))
        return "code just below the call's frame was not inside it";
    return NULL;
}

static const char *own_case(void)
{
    struct stack *s = &stacks[0];
    int mark;
    const char *why = enter_live(s, &mark);
    if (mark < 0)
        return why;
    if (!why && chainmark_inside(above_of(s)))
        why = "code above the call's frame was inside it";
    else if (!why && chainmark_inside(far_below(s)))
        why = "code 512 KiB below the call's frame was inside it";
    chainmark_leave(mark, word_of(s));
    if (!why && chainmark_inside(inside_of(s)))
        why = "the call was still live after it returned";
    return why;
}

/* Thread B marks and unmarks while thread A's call lasts. */
static const char *b_result, *c_result;

static void *thread_b(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&step); /* A has marked */
    struct stack *s = &stacks[1];
    int mark;
    b_result = enter_live(s, &mark);
    if (!b_result && chainmark_inside(inside_of(&stacks[0])))
        b_result = "A's call counted as B's";
    pthread_barrier_wait(&step); /* A checks with B marked */
    pthread_barrier_wait(&step);
    chainmark_leave(mark, word_of(s));
    pthread_barrier_wait(&step); /* A checks with B gone */
    return NULL;
}

static void *thread_c(void *arg)
{
    (void)arg;
    if (chainmark_inside(inside_of(&stacks[0])))
        c_result = "a thread without a call was inside A's";
    return NULL;
}

static const char *per_thread_case(void)
{
    pthread_t b, c;
    struct stack *s = &stacks[0];
    const char *why = NULL;
    pthread_barrier_init(&step, NULL, 2);
    int mark = chainmark_enter(frame_of(s), word_of(s));
    if (mark < 0 || pthread_create(&b, NULL, thread_b, NULL) != 0)
        return "no mark or no thread";
    pthread_barrier_wait(&step);
    pthread_barrier_wait(&step);
    if (!chainmark_inside(inside_of(s)))
        why = "A's call was not live once B had marked its own";
    pthread_barrier_wait(&step);
    pthread_barrier_wait(&step);
    if (!why && !chainmark_inside(inside_of(s)))
        why = "A's call was not live once B's had ended";
    pthread_join(b, NULL);
    pthread_create(&c, NULL, thread_c, NULL);
    pthread_join(c, NULL);
    chainmark_leave(mark, word_of(s));
    pthread_barrier_destroy(&step);
    return why ? why : b_result ? b_result : c_result;
}

static const char *jump_case(void)
{
    struct stack *s = &stacks[0];
    int mark = chainmark_enter(frame_of(s), word_of(s));
    const char *why = NULL;
    chainmark_jump(inside_of(s) - 4096); /* deeper still: the call goes on */
    if (!chainmark_inside(inside_of(s)))
        why = "a jump within the call ended it";
    chainmark_jump(above_of(s));
    if (!why && chainmark_inside(inside_of(s)))
        why = "a jump above the call's frame did not end it";
    chainmark_leave(mark, word_of(s));
    return why;
}

static const char *nested_case(void)
{
    struct stack *s = &stacks[0];
    /* An inner call made from inside the outer one, 8 KiB deeper. */
    uintptr_t inner_frame = frame_of(s) - 8192;
    volatile uint64_t *inner_word = (volatile uint64_t *)(inner_frame - 64);
    int outer = chainmark_enter(frame_of(s), word_of(s));
    int inner = chainmark_enter(inner_frame, inner_word);
    const char *why = NULL;
    if (outer < 0 || inner < 0)
        return "no marks were made";
    if (!chainmark_inside(inner_frame - 100))
        why = "the inner call was not live";
    chainmark_leave(inner, inner_word);
    if (!why && !chainmark_inside(inside_of(s)))
        why = "the outer call ended with the inner one";
    /* The inner call again, left by a jump into the outer one. */
    inner = chainmark_enter(inner_frame, inner_word);
    chainmark_jump(inner_frame + 512);
    if (!why && !chainmark_inside(inside_of(s)))
        why = "a jump out of the inner call into the outer one ended the outer";
    chainmark_leave(outer, word_of(s));
    if (!why && chainmark_inside(inner_frame - 100))
        why = "a call was live after the outer one returned";
    return why;
}

static const char *stale_word_case(void)
{
    struct stack *s = &stacks[0];
    int mark = chainmark_enter(frame_of(s), word_of(s));
    uint64_t live = *word_of(s);
    *word_of(s) = live + 1; /* code that ran there since wrote over it */
    const char *why = chainmark_inside(inside_of(s)) ? "a mark whose word changed was live" : NULL;
    *word_of(s) = live;
    if (!why && !chainmark_inside(inside_of(s)))
        why = "a mark with its word intact was not live";
    chainmark_leave(mark, word_of(s));
    return why;
}

/* THREADS threads (more than the table holds) each leave a mark behind
 * (a jump the module never saw), then end; one more thread must still
 * get a mark. */
static void *leave_mark_behind(void *arg)
{
    (void)arg;
    volatile uint64_t word;
    chainmark_enter((uintptr_t)&word + 64, &word);
    return NULL;
}

static const char *marker_result;

static void *mark_after_them(void *arg)
{
    (void)arg;
    int mark;
    marker_result = enter_live(&stacks[2], &mark);
    chainmark_leave(mark, word_of(&stacks[2]));
    return NULL;
}

static const char *ended_threads_case(void)
{
    for (int i = 0; i < THREADS; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, leave_mark_behind, NULL) != 0 || pthread_join(t, NULL) != 0)
            return "no thread";
    }
    pthread_t t;
    if (pthread_create(&t, NULL, mark_after_them, NULL) != 0 || pthread_join(t, NULL) != 0)
        return "no thread";
    return marker_result;
}

int main(void)
{
    int failed = 0;
    failed += report("own", own_case());
    failed += report("per_thread", per_thread_case());
    failed += report("jump", jump_case());
    failed += report("nested", nested_case());
    failed += report("stale_word", stale_word_case());
    failed += report("ended_threads", ended_threads_case());
    return failed ? 1 : 0;
}
