#include "neuron_runtime/topology.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "neuron_runtime/status.h"
#include "test_util.h"

namespace neuron_rt {
namespace {

using neuron_rt_test::EnvGuard;
using neuron_rt_test::runtimeEnvVars;
using neuron_rt_test::ThrowsError;

constexpr uint64_t kKiB = 1ull << 10;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kTiB = 1ull << 40;

const char kCoresVar[] = "NEURON_RT_VISIBLE_CORES";

// ---------------------------------------------------------------------------
// parseCoreList

TEST(ParseCoreListTest, SingleRange) {
  EXPECT_EQ(parseCoreList("0-1", 4, kCoresVar), (std::vector<int>{0, 1}));
}

TEST(ParseCoreListTest, SingleId) {
  EXPECT_EQ(parseCoreList("2", 4, kCoresVar), (std::vector<int>{2}));
}

TEST(ParseCoreListTest, CommaList) {
  EXPECT_EQ(parseCoreList("0,3", 4, kCoresVar), (std::vector<int>{0, 3}));
}

TEST(ParseCoreListTest, RangeAndId) {
  EXPECT_EQ(parseCoreList("0-1,3", 4, kCoresVar), (std::vector<int>{0, 1, 3}));
}

TEST(ParseCoreListTest, ResultIsSortedAndUnique) {
  EXPECT_EQ(parseCoreList("3,0-1", 4, kCoresVar), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(parseCoreList("1,0-2,1,2", 4, kCoresVar),
            (std::vector<int>{0, 1, 2}));
}

TEST(ParseCoreListTest, WhitespaceAroundItemsIsAccepted) {
  EXPECT_EQ(parseCoreList(" 0 - 1 , 3 ", 4, kCoresVar),
            (std::vector<int>{0, 1, 3}));
}

TEST(ParseCoreListTest, SingletonRangeAndLastValidId) {
  EXPECT_EQ(parseCoreList("2-2", 4, kCoresVar), (std::vector<int>{2}));
  EXPECT_EQ(parseCoreList("0-3", 4, kCoresVar), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(parseCoreList("31", 32, kCoresVar), (std::vector<int>{31}));
}

class ParseCoreListErrorTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ParseCoreListErrorTest, ThrowsInvalidConfigNamingTheVariable) {
  const std::string text = GetParam();
  EXPECT_TRUE(ThrowsError([&] { parseCoreList(text, 4, kCoresVar); },
                          Status::kInvalidConfig, {kCoresVar}))
      << "input: '" << text << "'";
}

INSTANTIATE_TEST_SUITE_P(Malformed, ParseCoreListErrorTest,
                         ::testing::Values("", " ", "a", "x1", "1x", "0-", "-1",
                                           "-", "1-0", "3-2", "0,,1", "0,",
                                           ",0", ",", "1.5", "0-1-2", "0:1",
                                           "+1", "0 1",
                                           "99999999999999999999"));

INSTANTIATE_TEST_SUITE_P(OutOfRange, ParseCoreListErrorTest,
                         ::testing::Values("4", "0-4", "2-7", "0,4", "0-1,5",
                                           "1000000000"));

TEST(ParseCoreListTest, ErrorMessageNamesVariableAndValue) {
  EXPECT_TRUE(ThrowsError([] { parseCoreList("0-9", 4, "MY_VAR"); },
                          Status::kInvalidConfig, {"MY_VAR", "0-9", "4"}));
}

// ---------------------------------------------------------------------------
// parseByteSize

TEST(ParseByteSizeTest, PlainByteCount) {
  EXPECT_EQ(parseByteSize("1073741824", "V"), kGiB);
  EXPECT_EQ(parseByteSize("1", "V"), 1u);
  EXPECT_EQ(parseByteSize("100B", "V"), 100u);
}

TEST(ParseByteSizeTest, BinaryUnits) {
  EXPECT_EQ(parseByteSize("64KiB", "V"), 64 * kKiB);
  EXPECT_EQ(parseByteSize("512MiB", "V"), 512 * kMiB);
  EXPECT_EQ(parseByteSize("24GiB", "V"), 24 * kGiB);
  EXPECT_EQ(parseByteSize("1TiB", "V"), kTiB);
}

TEST(ParseByteSizeTest, DecimalLookingUnitsAreBinary) {
  EXPECT_EQ(parseByteSize("2GB", "V"), 2 * kGiB);
  EXPECT_EQ(parseByteSize("3MB", "V"), 3 * kMiB);
  EXPECT_EQ(parseByteSize("5KB", "V"), 5 * kKiB);
}

TEST(ParseByteSizeTest, ShortUnitsCaseAndWhitespace) {
  EXPECT_EQ(parseByteSize("8k", "V"), 8 * kKiB);
  EXPECT_EQ(parseByteSize("8M", "V"), 8 * kMiB);
  EXPECT_EQ(parseByteSize("8g", "V"), 8 * kGiB);
  EXPECT_EQ(parseByteSize("8mib", "V"), 8 * kMiB);
  EXPECT_EQ(parseByteSize("8GIB", "V"), 8 * kGiB);
  EXPECT_EQ(parseByteSize(" 8 MiB ", "V"), 8 * kMiB);
}

TEST(ParseByteSizeTest, LargestRepresentableValues) {
  EXPECT_EQ(parseByteSize("16777215TiB", "V"), 16777215ull * kTiB);
  EXPECT_EQ(parseByteSize("999999999999999999", "V"), 999999999999999999ull);
}

class ParseByteSizeErrorTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ParseByteSizeErrorTest, ThrowsInvalidConfigNamingTheVariable) {
  const std::string text = GetParam();
  EXPECT_TRUE(ThrowsError([&] { parseByteSize(text, "SIZE_VAR"); },
                          Status::kInvalidConfig, {"SIZE_VAR"}))
      << "input: '" << text << "'";
}

INSTANTIATE_TEST_SUITE_P(
    Malformed, ParseByteSizeErrorTest,
    ::testing::Values("", "  ", "0", "0GiB", "-1", "-1GiB", "GiB", "1.5GiB",
                      "12XB", "1PiB", "1 2", "1GiBx", "0x10", "1e9",
                      // > 18 digits is rejected rather than overflowing.
                      "18446744073709551616",
                      // Overflows uint64 once the unit is applied.
                      "16777216TiB", "17179869184GiB"));

// ---------------------------------------------------------------------------
// Topology

TEST(TopologyTest, DefaultIsOneChipWithFourLogicalCoresOf24GiB) {
  TopologyConfig config;
  EXPECT_EQ(config.num_chips, 1);
  EXPECT_EQ(config.physical_cores_per_chip, 8);
  EXPECT_EQ(config.logical_core_size, 2);
  EXPECT_EQ(config.hbm_bytes_per_core, 24 * kGiB);
  EXPECT_TRUE(config.visible_cores.empty());

  Topology topo(config);
  EXPECT_EQ(topo.logicalCoresPerChip(), 4);
  EXPECT_EQ(topo.totalLogicalCores(), 4);
  ASSERT_EQ(topo.numVisibleCores(), 4);
  for (int i = 0; i < 4; ++i) {
    const CoreInfo& c = topo.core(i);
    EXPECT_EQ(c.index, i);
    EXPECT_EQ(c.logical_core, i);
    EXPECT_EQ(c.chip, 0);
    EXPECT_EQ(c.hbm_bytes, 24 * kGiB);
  }
  EXPECT_THROW(topo.core(4), std::out_of_range);
}

TEST(TopologyTest, LogicalCoreSizeOneExposesEveryPhysicalCore) {
  TopologyConfig config;
  config.logical_core_size = 1;
  Topology topo(config);
  EXPECT_EQ(topo.logicalCoresPerChip(), 8);
  EXPECT_EQ(topo.numVisibleCores(), 8);
}

TEST(TopologyTest, MultipleChipsNumberCoresAcrossChips) {
  TopologyConfig config;
  config.num_chips = 2;
  Topology topo(config);
  EXPECT_EQ(topo.totalLogicalCores(), 8);
  ASSERT_EQ(topo.numVisibleCores(), 8);
  EXPECT_EQ(topo.core(3).chip, 0);
  EXPECT_EQ(topo.core(4).chip, 1);
  EXPECT_EQ(topo.core(7).chip, 1);
  EXPECT_EQ(topo.core(7).logical_core, 7);
}

TEST(TopologyTest, VisibleCoresAreRenumberedFromZero) {
  TopologyConfig config;
  config.num_chips = 2;
  config.visible_cores = {1, 5};
  config.hbm_bytes_per_core = 4 * kGiB;
  Topology topo(config);
  ASSERT_EQ(topo.numVisibleCores(), 2);
  EXPECT_EQ(topo.core(0).index, 0);
  EXPECT_EQ(topo.core(0).logical_core, 1);
  EXPECT_EQ(topo.core(0).chip, 0);
  EXPECT_EQ(topo.core(1).index, 1);
  EXPECT_EQ(topo.core(1).logical_core, 5);
  EXPECT_EQ(topo.core(1).chip, 1);
  EXPECT_EQ(topo.core(1).hbm_bytes, 4 * kGiB);
  EXPECT_EQ(topo.config().visible_cores, (std::vector<int>{1, 5}));
}

TEST(TopologyTest, InvalidConfigurationsThrow) {
  {
    TopologyConfig c;
    c.visible_cores = {4};
    EXPECT_TRUE(
        ThrowsError([&] { Topology t(c); }, Status::kInvalidConfig, {"4"}));
  }
  {
    TopologyConfig c;
    c.visible_cores = {-1};
    EXPECT_TRUE(ThrowsError([&] { Topology t(c); }, Status::kInvalidConfig));
  }
  {
    TopologyConfig c;
    c.num_chips = 0;
    EXPECT_TRUE(ThrowsError([&] { Topology t(c); }, Status::kInvalidConfig));
  }
  {
    TopologyConfig c;
    c.logical_core_size = 3;  // 8 physical cores do not split into 3s
    EXPECT_TRUE(ThrowsError([&] { Topology t(c); }, Status::kInvalidConfig));
  }
  {
    TopologyConfig c;
    c.logical_core_size = 0;
    EXPECT_TRUE(ThrowsError([&] { Topology t(c); }, Status::kInvalidConfig));
  }
}

// ---------------------------------------------------------------------------
// Topology::configFromEnv. Each test starts with all runtime variables unset
// and restores the caller's environment afterwards.

class ConfigFromEnvTest : public ::testing::Test {
 protected:
  EnvGuard env_{runtimeEnvVars()};
};

TEST_F(ConfigFromEnvTest, DefaultsWithoutEnvironment) {
  TopologyConfig c = Topology::configFromEnv();
  EXPECT_EQ(c.num_chips, 1);
  EXPECT_EQ(c.logical_core_size, 2);
  EXPECT_EQ(c.hbm_bytes_per_core, 24 * kGiB);
  EXPECT_TRUE(c.visible_cores.empty());
  EXPECT_EQ(Topology(c).numVisibleCores(), 4);
}

TEST_F(ConfigFromEnvTest, EmptyValuesCountAsUnset) {
  for (const auto& v : runtimeEnvVars()) env_.set(v, "");
  TopologyConfig c = Topology::configFromEnv();
  EXPECT_EQ(c.num_chips, 1);
  EXPECT_EQ(c.logical_core_size, 2);
  EXPECT_EQ(c.hbm_bytes_per_core, 24 * kGiB);
  EXPECT_TRUE(c.visible_cores.empty());
}

TEST_F(ConfigFromEnvTest, VisibleCores) {
  env_.set("NEURON_RT_VISIBLE_CORES", "0-1,3");
  TopologyConfig c = Topology::configFromEnv();
  EXPECT_EQ(c.visible_cores, (std::vector<int>{0, 1, 3}));
  Topology topo(c);
  ASSERT_EQ(topo.numVisibleCores(), 3);
  EXPECT_EQ(topo.core(2).logical_core, 3);
}

TEST_F(ConfigFromEnvTest, VisibleCoresOutOfRangeOrMalformed) {
  env_.set("NEURON_RT_VISIBLE_CORES", "4");  // 4 logical cores: 0..3
  EXPECT_TRUE(ThrowsError([] { Topology::configFromEnv(); },
                          Status::kInvalidConfig, {"NEURON_RT_VISIBLE_CORES"}));
  env_.set("NEURON_RT_VISIBLE_CORES", "0-");
  EXPECT_TRUE(ThrowsError([] { Topology::configFromEnv(); },
                          Status::kInvalidConfig, {"NEURON_RT_VISIBLE_CORES"}));
}

TEST_F(ConfigFromEnvTest, HbmBytesPerCore) {
  env_.set("TORCH_NEURONX_HBM_BYTES_PER_CORE", "512MiB");
  EXPECT_EQ(Topology::configFromEnv().hbm_bytes_per_core, 512 * kMiB);
  env_.set("TORCH_NEURONX_HBM_BYTES_PER_CORE", "1TiB");  // the maximum
  EXPECT_EQ(Topology::configFromEnv().hbm_bytes_per_core, kTiB);
}

TEST_F(ConfigFromEnvTest, HbmBytesPerCoreErrors) {
  for (const char* bad : {"abc", "0", "-1GiB", "2TiB", "1099511627777"}) {
    env_.set("TORCH_NEURONX_HBM_BYTES_PER_CORE", bad);
    EXPECT_TRUE(ThrowsError([] { Topology::configFromEnv(); },
                            Status::kInvalidConfig,
                            {"TORCH_NEURONX_HBM_BYTES_PER_CORE"}))
        << "value: " << bad;
  }
}

TEST_F(ConfigFromEnvTest, LogicalNcConfigOne) {
  env_.set("NEURON_LOGICAL_NC_CONFIG", "1");
  TopologyConfig c = Topology::configFromEnv();
  EXPECT_EQ(c.logical_core_size, 1);
  // Default HBM is split over twice as many logical cores.
  EXPECT_EQ(c.hbm_bytes_per_core, 12 * kGiB);
  EXPECT_EQ(Topology(c).numVisibleCores(), 8);
}

TEST_F(ConfigFromEnvTest, LogicalNcConfigTwo) {
  env_.set("NEURON_LOGICAL_NC_CONFIG", "2");
  TopologyConfig c = Topology::configFromEnv();
  EXPECT_EQ(c.logical_core_size, 2);
  EXPECT_EQ(c.hbm_bytes_per_core, 24 * kGiB);
}

TEST_F(ConfigFromEnvTest, LogicalNcConfigChangesVisibleCoreLimit) {
  env_.set("NEURON_RT_VISIBLE_CORES", "7");
  EXPECT_TRUE(ThrowsError([] { Topology::configFromEnv(); },
                          Status::kInvalidConfig, {"NEURON_RT_VISIBLE_CORES"}));
  env_.set("NEURON_LOGICAL_NC_CONFIG", "1");
  EXPECT_EQ(Topology::configFromEnv().visible_cores, (std::vector<int>{7}));
}

TEST_F(ConfigFromEnvTest, LogicalNcConfigErrors) {
  for (const char* bad : {"0", "3", "4", "two", "1,2"}) {
    env_.set("NEURON_LOGICAL_NC_CONFIG", bad);
    EXPECT_TRUE(ThrowsError([] { Topology::configFromEnv(); },
                            Status::kInvalidConfig,
                            {"NEURON_LOGICAL_NC_CONFIG"}))
        << "value: " << bad;
  }
}

TEST_F(ConfigFromEnvTest, HbmOverrideWinsOverLogicalNcDefault) {
  env_.set("NEURON_LOGICAL_NC_CONFIG", "1");
  env_.set("TORCH_NEURONX_HBM_BYTES_PER_CORE", "1GiB");
  EXPECT_EQ(Topology::configFromEnv().hbm_bytes_per_core, kGiB);
}

TEST_F(ConfigFromEnvTest, NumChips) {
  env_.set("TORCH_NEURONX_NUM_CHIPS", "2");
  env_.set("NEURON_RT_VISIBLE_CORES", "6-7");
  TopologyConfig c = Topology::configFromEnv();
  EXPECT_EQ(c.num_chips, 2);
  Topology topo(c);
  ASSERT_EQ(topo.numVisibleCores(), 2);
  EXPECT_EQ(topo.core(0).chip, 1);

  for (const char* bad : {"0", "65", "x"}) {
    env_.set("TORCH_NEURONX_NUM_CHIPS", bad);
    EXPECT_TRUE(ThrowsError([] { Topology::configFromEnv(); },
                            Status::kInvalidConfig,
                            {"TORCH_NEURONX_NUM_CHIPS"}))
        << "value: " << bad;
  }
}

// NEURON_RT_NUM_CORES=n: the process takes n cores (the first n, as the
// Neuron runtime takes the first free ones); 0 means all. It only counts
// cores, so NEURON_RT_VISIBLE_CORES, which names them, wins when both are set.
TEST_F(ConfigFromEnvTest, NumCoresLimitsTheVisibleCores) {
  env_.set("NEURON_RT_NUM_CORES", "2");
  TopologyConfig c = Topology::configFromEnv();
  EXPECT_EQ(c.visible_cores, (std::vector<int>{0, 1}));
  EXPECT_EQ(Topology(c).numVisibleCores(), 2);
  env_.set("NEURON_RT_NUM_CORES", "0");
  EXPECT_EQ(Topology(Topology::configFromEnv()).numVisibleCores(), 4);
  env_.set("NEURON_RT_NUM_CORES", "4");
  EXPECT_EQ(Topology(Topology::configFromEnv()).numVisibleCores(), 4);
  env_.set("NEURON_LOGICAL_NC_CONFIG", "1");  // 8 logical cores
  env_.set("NEURON_RT_NUM_CORES", "6");
  EXPECT_EQ(Topology(Topology::configFromEnv()).numVisibleCores(), 6);
}

TEST_F(ConfigFromEnvTest, NumCoresYieldsToVisibleCores) {
  env_.set("NEURON_RT_NUM_CORES", "1");
  env_.set("NEURON_RT_VISIBLE_CORES", "2-3");
  EXPECT_EQ(Topology::configFromEnv().visible_cores, (std::vector<int>{2, 3}));
}

TEST_F(ConfigFromEnvTest, NumCoresErrors) {
  for (const char* bad : {"5", "-1", "two", "1.5", "1-2"}) {
    env_.set("NEURON_RT_NUM_CORES", bad);
    EXPECT_TRUE(ThrowsError([] { Topology::configFromEnv(); },
                            Status::kInvalidConfig,
                            {"NEURON_RT_NUM_CORES", "from 0 (all) to 4"}))
        << "value: " << bad;
  }
}

// The guard itself: values set before a test are restored after it.
TEST(EnvGuardTest, RestoresPreviousValues) {
  EnvGuard outer(runtimeEnvVars());
  setenv("NEURON_RT_VISIBLE_CORES", "2", 1);
  unsetenv("NEURON_LOGICAL_NC_CONFIG");
  {
    EnvGuard guard({"NEURON_RT_VISIBLE_CORES", "NEURON_LOGICAL_NC_CONFIG"});
    EXPECT_EQ(std::getenv("NEURON_RT_VISIBLE_CORES"), nullptr);
    guard.set("NEURON_RT_VISIBLE_CORES", "0");
    guard.set("NEURON_LOGICAL_NC_CONFIG", "1");
  }
  ASSERT_NE(std::getenv("NEURON_RT_VISIBLE_CORES"), nullptr);
  EXPECT_STREQ(std::getenv("NEURON_RT_VISIBLE_CORES"), "2");
  EXPECT_EQ(std::getenv("NEURON_LOGICAL_NC_CONFIG"), nullptr);
}

}  // namespace
}  // namespace neuron_rt
