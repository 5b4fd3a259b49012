#include "ddstage/store_control.hpp"
