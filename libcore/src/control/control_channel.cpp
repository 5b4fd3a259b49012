#include "control_channel.hpp"
