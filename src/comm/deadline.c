/* One deadline per call (docs/dev/agreement.md, "One deadline per call").
 *
 * The steps of a collective call (the host-sync path's setup gather, the
 * descriptor exchange) and its agreement share one bound, the timeout from
 * the call's entry, so that a rank missing from the call costs the others
 * one timeout, and the verdict names that rank: a rank whose step waits
 * for it gives up two slacks early, in time for its outcome (blaming the
 * rank it waited for) to reach the collector, which gives up one slack
 * early so that its verdict reaches the members within their bound. A step
 * after an agreement (a heap growth step, a second agreement) starts a
 * bound of its own: every rank was present at that agreement. */
#include "comm/comm.h"

int vmmipc__slack_ms(const struct vmmipc_comm *c) { return c->timeout_ms / 10 < 1000 ? c->timeout_ms / 10 : 1000; }

int64_t vmmipc__deadline(struct vmmipc_comm *c) {
  if (!c->deadline_ms) c->deadline_ms = vmmipc__now_ms() + c->timeout_ms;
  return c->deadline_ms;
}

int64_t vmmipc__step_deadline(struct vmmipc_comm *c) { return vmmipc__deadline(c) - 2 * vmmipc__slack_ms(c); }
