// fafo-studio's playback of steps and the gate between generator and UI: pausing,
// stepping, following and restarting what is shown; traces queued, a paused generator
// held in on_step(), a pause that ends with its generation, and a closed gate that never waits.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "studio_test_traces.h"
#include "playback.h"
#include "step_gate.h"

using namespace fafo;
using namespace fafo::studio;
using fafo::test::hand_step;
using fafo::test::plain_step;

TEST(StudioViews, PlaybackPausesStepsAndFollows) {
  Playback p;
  p.set_speed(2.0);
  p.update(1.0, 10);
  EXPECT_EQ(p.shown(), 2u);
  p.pause();
  p.update(5.0, 10);
  EXPECT_EQ(p.shown(), 2u);
  p.step_once(10);
  EXPECT_EQ(p.shown(), 3u);
  p.step_back();
  EXPECT_EQ(p.shown(), 2u);
  p.resume();
  p.set_speed(0.0);
  p.update(0.01, 10);
  EXPECT_EQ(p.shown(), 10u);
  p.step_once(10);  // nothing more to show
  EXPECT_EQ(p.shown(), 10u);
  p.seek(4, 10);
  EXPECT_EQ(p.shown(), 5u);
}

// Step while a live generation is held: the step asked for is shown when it comes, so
// one press is one step (the first start's first step is shown so too).
TEST(StudioViews, PlaybackShowsAStepAskedForWhenItComes) {
  Playback p;
  p.step_once(0);  // the first start: paused, its first step wanted
  EXPECT_TRUE(p.paused());
  EXPECT_TRUE(p.waiting_for_step());
  p.update(0.1, 0);
  EXPECT_EQ(p.shown(), 0u);
  p.restart();  // the generation's first drain
  p.update(0.1, 1);
  EXPECT_EQ(p.shown(), 1u);
  EXPECT_FALSE(p.waiting_for_step());
  p.update(0.1, 2);  // paused: no more than asked for
  EXPECT_EQ(p.shown(), 1u);
  p.step_once(2);  // a step known: shown at once
  EXPECT_EQ(p.shown(), 2u);
  p.step_once(2);  // past the newest: shown when it comes
  EXPECT_EQ(p.shown(), 2u);
  p.update(0.1, 2);
  EXPECT_EQ(p.shown(), 2u);
  p.update(0.1, 4);
  EXPECT_EQ(p.shown(), 3u);
  p.step_once(4);
  p.step_back();  // going back forgets a step asked for
  EXPECT_FALSE(p.waiting_for_step());
  p.step_once(4);
  p.step_once(4);
  p.resume();
  EXPECT_FALSE(p.waiting_for_step());
}

// The Debugger's Run while its playback is paused: the new run starts paused, and its
// first step is shown when it comes, not a last step of the run it ended.
TEST(StudioViews, PlaybackWaitsForTheFirstStepOfTheNextRun) {
  Playback p;
  p.update(0.1, 7);
  EXPECT_EQ(p.shown(), 7u);
  p.pause_for_next_sequence();
  EXPECT_TRUE(p.paused());
  p.update(0.1, 8);  // a step of the run it ended
  EXPECT_EQ(p.shown(), 7u);
  p.restart();  // the new run's first drain
  p.update(0.1, 0);
  EXPECT_EQ(p.shown(), 0u);
  p.update(0.1, 1);
  EXPECT_EQ(p.shown(), 1u);
  p.update(0.1, 3);
  EXPECT_EQ(p.shown(), 1u) << "paused after the first step";
  p.restart();  // asked for once
  p.update(0.1, 2);
  EXPECT_EQ(p.shown(), 0u);
  p.pause_for_next_sequence();
  p.resume();  // Resume forgets it
  p.restart();
  p.set_speed(0.0);
  p.update(0.1, 4);
  EXPECT_EQ(p.shown(), 4u);
}

TEST(StudioViews, PlaybackRestartsForANewGeneration) {
  Playback p;
  p.update(0.1, 7);
  EXPECT_EQ(p.shown(), 7u);
  p.restart();
  EXPECT_EQ(p.shown(), 0u);
  p.update(0.1, 2);
  EXPECT_EQ(p.shown(), 2u);
}

// The gate between generator and UI: traces queue up, a new generation clears what
// the UI holds, max_steps and stop() end it, and a paused generator waits in
// on_step() until resumed, given a step, or stopped.
TEST(StudioViews, StepGateQueuesPausesAndStops) {
  StepGate gate;
  std::vector<StepTrace> out = {plain_step(9, 9, 9)};
  EXPECT_FALSE(gate.drain(out));  // nothing began: what the UI holds (a replay) stays
  EXPECT_EQ(out.size(), 1u);
  gate.begin(3);
  gate.on_step(plain_step(0, 5, 0));
  gate.on_step(hand_step());
  EXPECT_FALSE(gate.should_stop());
  EXPECT_TRUE(gate.drain(out));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].step, 3);
  EXPECT_EQ(gate.stats().tokens, 3);
  EXPECT_DOUBLE_EQ(gate.stats().tau(), 1.5);
  gate.on_step(plain_step(4, 6, 12));
  EXPECT_TRUE(gate.should_stop()) << "max_steps reached";
  EXPECT_FALSE(gate.drain(out));
  EXPECT_EQ(out.size(), 3u);
  gate.begin();
  EXPECT_FALSE(gate.should_stop());

  gate.set_paused(true);
  std::atomic<int> done{0};
  std::thread generator([&] {
    for (int i = 0; i < 3 && !gate.should_stop(); ++i) {
      gate.on_step(plain_step(i, i, i));
      ++done;
    }
  });
  auto wait_for = [](auto&& cond) {
    for (int i = 0; i < 2000 && !cond(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return cond();
  };
  ASSERT_TRUE(wait_for([&] { return gate.waiting(); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(done.load(), 0) << "paused: waits after its first step";
  gate.allow_one_step();
  ASSERT_TRUE(wait_for([&] { return done.load() == 1 && gate.waiting(); }));
  gate.stop();  // while waiting: must not hang
  generator.join();
  EXPECT_EQ(done.load(), 2);
  EXPECT_TRUE(gate.drain(out));
  EXPECT_EQ(out.size(), 2u);
}

namespace {

// Runs gate.on_step(t) on a thread of its own and returns whether it waits there for the
// debugger (then gives it its step) or returns. No time limit: one of the two happens.
bool on_step_waits(StepGate& gate, const StepTrace& t) {
  std::atomic<bool> returned{false};
  std::thread generator([&] {
    gate.on_step(t);
    returned = true;
  });
  bool waited = false;
  while (!returned && !waited) {
    waited = gate.waiting();
    if (!waited) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (waited) gate.allow_one_step();
  generator.join();
  return waited;
}

}  // namespace

// A pause belongs to one generation: begin() says whether it starts paused (a pause
// asked for before it does not reach it), the Debugger's Pause holds it while it runs,
// and its end ends the pause, so a chat reply after a Debugger run that was held never
// waits for a Resume the Chat view does not have. A released generator no longer counts
// as waiting, before it has left.
TEST(StudioViews, StepGatePausesOneGenerationAtATime) {
  StepGate gate;
  gate.begin(0, true);  // the first start's run
  EXPECT_TRUE(gate.paused());
  EXPECT_TRUE(on_step_waits(gate, plain_step(0, 1, 0))) << "begun paused: waits after its first step";
  gate.end();  // stopped in the Debugger, or stepped to its end
  EXPECT_FALSE(gate.paused()) << "the pause ended with its generation";
  gate.begin();  // a chat reply
  EXPECT_FALSE(on_step_waits(gate, plain_step(0, 1, 0)));
  gate.set_paused(true);  // the Debugger's Pause while it runs
  EXPECT_TRUE(on_step_waits(gate, plain_step(1, 2, 5)));
  gate.end();
  gate.set_paused(true);  // a pause asked for between generations
  gate.begin();
  EXPECT_FALSE(gate.paused());
  EXPECT_FALSE(on_step_waits(gate, plain_step(0, 1, 0))) << "a pause does not reach the next generation";
  gate.end();

  gate.begin(0, true);
  std::thread generator([&] { gate.on_step(plain_step(0, 1, 0)); });
  while (!gate.waiting()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  gate.stop();
  EXPECT_FALSE(gate.waiting()) << "released by the stop request";
  generator.join();
  gate.end();
}

// Destroying the engine closes its gate: the running generation stops, and so does one
// the worker begins after that (it had taken its job just before), even begun paused:
// begin() clears a stop request, not the close, and a closed gate never waits.
TEST(StudioViews, AClosedStepGateNeverWaits) {
  StepGate gate;
  gate.begin(0, true);
  gate.stop();
  gate.close();
  gate.begin(0, true);  // the paused run the worker took as the engine closed
  EXPECT_TRUE(gate.should_stop());
  EXPECT_FALSE(on_step_waits(gate, plain_step(0, 1, 0))) << "a closed gate held the generator";
  gate.set_paused(true);
  EXPECT_FALSE(on_step_waits(gate, plain_step(1, 2, 5)));
  EXPECT_TRUE(gate.should_stop());

  // A generator waiting when the gate closes goes on at once.
  StepGate held;
  held.begin(0, true);
  std::thread generator([&] { held.on_step(plain_step(0, 1, 0)); });
  while (!held.waiting()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  held.close();
  const bool still_waits = held.waiting();
  EXPECT_FALSE(still_waits) << "close() did not release the generator";
  if (still_waits) held.allow_one_step();
  generator.join();
  EXPECT_TRUE(held.should_stop());
}
